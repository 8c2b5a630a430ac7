"""Offline stand-ins for what Accelerate's external_deps scripts download, for the compatibility suite.

Only package registries are reachable here, so a script's ``load_dataset("nyu-mll/glue", "mrpc")``,
``evaluate.load("glue", "mrpc")`` and its Hub model cannot be fetched. The harnesses
(``accelerate_compat.py``, ``accelerate_examples.py``) point the first two at ``load_dataset`` and
``load`` below, and hand the script a tiny BERT made by ``make_tiny_bert`` (or a tiny causal LM made
by ``make_tiny_causal_lm``) as its model. The data has MRPC's columns and a learnable label (whether
the two sentences share their first word); a WikiText name gets lines of text; a local file format
("text", "csv", "json") is read by ``datasets`` itself. The training, checkpointing and evaluation
code of the script runs unchanged.

Examples:
    >>> split = load_dataset("nyu-mll/glue", "mrpc")["validation"]
    >>> sorted(split.column_names), len(split)
    (['idx', 'label', 'sentence1', 'sentence2'], 40)
    >>> metric = load("glue", "mrpc")
    >>> metric.add_batch(predictions=[1, 0, 1], references=[1, 1, 1])
    >>> metric.compute()["accuracy"]
    0.6666666666666666
"""

from __future__ import annotations

import os
import random
from typing import Any

WORDS = [
    "river",
    "stone",
    "cloud",
    "apple",
    "tiger",
    "paper",
    "glass",
    "music",
    "light",
    "storm",
    "bread",
    "chair",
    "ocean",
    "pencil",
    "garden",
    "winter",
]
SIZES = {"train": 96, "validation": 40}


def _rows(count: int, seed: int) -> dict[str, list]:
    draw = random.Random(seed)
    rows: dict[str, list] = {"idx": [], "sentence1": [], "sentence2": [], "label": []}
    for index in range(count):
        first = draw.choices(WORDS, k=draw.randint(3, 8))
        label = index % 2
        second = draw.choices(WORDS, k=draw.randint(3, 8))
        second[0] = first[0] if label else draw.choice([w for w in WORDS if w != first[0]])
        rows["idx"].append(index)
        rows["sentence1"].append(" ".join(first))
        rows["sentence2"].append(" ".join(second))
        rows["label"].append(label)
    return rows


LOCAL_FORMATS = ("text", "csv", "json", "parquet")


def load_dataset(*names: Any, **options: Any) -> Any:
    """MRPC-shaped ``DatasetDict`` (train, validation), the same on every rank and call; WikiText's
    name gives lines of text (train, validation, test); local files are read by ``datasets``."""
    import datasets
    from datasets import Dataset, DatasetDict

    if names and names[0] in LOCAL_FORMATS:  # a local file: ``datasets`` reads it (this module shadows its name)
        return datasets.load_dataset(*names, **options)
    if any("wikitext" in str(name) for name in names):
        return DatasetDict(
            {split: Dataset.from_dict({"text": text_lines(seed, count)}) for seed, (split, count) in enumerate(TEXT)}
        )
    return DatasetDict(
        {split: Dataset.from_dict(_rows(count, seed)) for seed, (split, count) in enumerate(SIZES.items())}
    )


TEXT = (("train", 512), ("validation", 64), ("test", 64))  # the autoregressive example takes 500 lines


def text_lines(seed: int, count: int) -> list[str]:
    """Lines of words as WikiText has them, a few of them empty."""
    draw = random.Random(seed)
    return ["" if index % 8 == 7 else " ".join(draw.choices(WORDS, k=draw.randint(4, 12))) for index in range(count)]


class _Metric:
    """GLUE MRPC's metric: accuracy and F1 of the positive class, over the batches added."""

    def __init__(self) -> None:
        self.pairs: list[tuple[int, int]] = []

    def add_batch(self, predictions: Any, references: Any) -> None:
        self.pairs += [(int(p), int(r)) for p, r in zip(predictions, references, strict=True)]

    def compute(self, predictions: Any = None, references: Any = None) -> dict[str, float]:
        if predictions is not None:
            self.add_batch(predictions, references)
        pairs, self.pairs = self.pairs, []
        hits = sum(p == r for p, r in pairs)
        true_positive = sum(p == r == 1 for p, r in pairs)
        predicted, actual = sum(p for p, _ in pairs), sum(r for _, r in pairs)
        f1 = 2 * true_positive / (predicted + actual) if predicted + actual else 0.0
        return {"accuracy": hits / len(pairs), "f1": f1}


def load(*names: Any, **options: Any) -> _Metric:
    """``evaluate.load("glue", "mrpc")``'s metric."""
    return _Metric()


def make_tiny_bert(directory: str) -> str:
    """A randomly initialised 2-layer BERT for sequence classification and its WordPiece tokenizer,
    saved as ``from_pretrained`` reads them; returns ``directory``."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    os.makedirs(directory, exist_ok=True)
    vocab = os.path.join(directory, "vocab.txt")
    with open(vocab, "w") as file:
        file.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=vocab).save_pretrained(directory)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertForSequenceClassification(config).save_pretrained(directory)
    return directory


def make_tiny_causal_lm(directory: str) -> str:
    """A randomly initialised 2-layer Llama and a word-level tokenizer (with end-of-text, padding
    and unknown tokens), saved as ``from_pretrained`` reads them; returns ``directory``."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.makedirs(directory, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>"]
    words = models.WordLevel({token: index for index, token in enumerate(specials + WORDS)}, unk_token="<unk>")
    tokenizer = Tokenizer(words)
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=64
    )
    fast.save_pretrained(directory)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(specials) + len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory

"""The source of the big model that the big-model tests and ``bench/big_model.py`` save, load and
dispatch in fresh processes (written to a file they import there): 12 transformer-style MLP blocks,
403 MB of float32."""

from textwrap import dedent

__all__ = ["MODEL"]

MODEL = dedent("""
    import torch

    class Block(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.norm = torch.nn.LayerNorm(width)
            self.up = torch.nn.Linear(width, 4 * width)
            self.down = torch.nn.Linear(4 * width, width)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class Model(torch.nn.Module):
        def __init__(self, width=1024, depth=12):     # 12 blocks of 33.6 MB: 403 MB of float32
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
            self.head = torch.nn.Linear(width, 10)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x)
""")

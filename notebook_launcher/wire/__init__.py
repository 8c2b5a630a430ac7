"""What crosses between the kernel and a rank: the pipes and their events (``channel``), return
values (``values``, with large tensors through shared memory: ``shared_tensors``) and exceptions
(``reports``)."""

from .channel import (
    DISPLAY,
    ERROR,
    EVENT_KINDS,
    METRIC,
    OUTPUT,
    REPLY,
    RESULT,
    SIGNAL_SENDER_MARK,
    STACKS,
    STACKS_SIGNAL,
    STATUS,
    BadFrame,
    ChannelWriter,
    FrameReader,
    LineReader,
    last_frame,
    rank_channel,
    set_rank_channel,
)
from .reports import error_report, rebuild_exception
from .values import dumps_for_kernel, set_tensor_prefix

__all__ = [
    "DISPLAY",
    "ERROR",
    "EVENT_KINDS",
    "METRIC",
    "OUTPUT",
    "REPLY",
    "RESULT",
    "STACKS",
    "SIGNAL_SENDER_MARK",
    "STACKS_SIGNAL",
    "STATUS",
    "BadFrame",
    "ChannelWriter",
    "FrameReader",
    "LineReader",
    "dumps_for_kernel",
    "error_report",
    "last_frame",
    "rank_channel",
    "rebuild_exception",
    "set_rank_channel",
    "set_tensor_prefix",
]

"""Between the parser and the store: Canal's transaction buffer, its sink rules (empty transactions,
heartbeats, filter.transaction.entry) and the n:1 group merge.

    sink = EntrySink(store.put, transaction_size=1024)      # the parser's sink: sink(entries) blocks until stored
    group = GroupSink(store.put, {"a": ident_a, "b": ident_b})
    parser_a.sink = group.source("a"); parser_b.sink = group.source("b")
    group.positions()                                         # per-source resume positions
"""

from .buffer import TransactionBuffer
from .entry import EntrySink, position_after
from .group import GroupSink, SinkClosedError, SourceSink

__all__ = ["EntrySink", "GroupSink", "SinkClosedError", "SourceSink", "TransactionBuffer", "position_after"]

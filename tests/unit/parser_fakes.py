"""Stand-ins for what an EventParser reads from, so parser tests run without a server.

FakeSource streams the events it is given and then waits until closed, as a live dump does; FakeHistory is a
schema history that already has its first snapshot (the parser restores instead of bootstrapping) and knows at
most one table."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from canal_core.mysql import ServerInfo
from canal_core.parse.model import TableMeta


class FakeSource:
    def __init__(self, info: ServerInfo, events: list[bytes]) -> None:
        self.info = info
        self.to_stream = events
        self.closed = threading.Event()

    def connect(self) -> FakeSource:
        return self

    def server_info(self) -> ServerInfo:
        return self.info

    def dump(self, file: str, position: int, *, gtid: str | None = None) -> Iterator[bytes]:
        yield from self.to_stream
        self.closed.wait(30)

    def close(self) -> None:
        self.closed.set()


class FakeHistory:
    empty = False

    def __init__(self, table: TableMeta | None = None) -> None:
        self.known = table

    def restore(self, as_of: Any) -> None:
        pass

    def maybe_snapshot(self, position: Any, *, force: bool = False) -> bool:
        return False

    def table(self, schema: str, table: str) -> TableMeta | None:
        return self.known if self.known is not None and table == self.known.name else None

    def hints(self, schema: str, table: str) -> Any:
        found = self.table(schema, table)
        return found.hints() if found is not None else None

    def check_table_map(self, tdef: Any, pos: Any) -> None:
        pass

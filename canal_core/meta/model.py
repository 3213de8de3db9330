"""Meta model: who a client is, what an outstanding batch covers, and Canal's JSON for both.

Canal serializes with fastjson's defaults: keys sorted by name, nulls omitted, no ``"@type"`` unless asked
(ZooKeeper payloads ask for it). The encoders below reproduce that byte for byte.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..protocol.identity import ClientIdentity
from ..protocol.position import LOG_POSITION_TYPE, EntryPosition, LogIdentity, LogPosition

POSITION_RANGE_TYPE = "com.alibaba.otter.canal.protocol.position.PositionRange"


def dumps(obj: Any) -> str:
    """Compact JSON as fastjson writes it (raw UTF-8, no spaces)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def log_position_dict(pos: LogPosition, *, with_type: bool = False) -> dict[str, Any]:
    """LogPosition as a JSON object (``LogPosition.to_json`` gives only the text)."""
    d: dict[str, Any] = {"@type": LOG_POSITION_TYPE} if with_type else {}
    d["identity"] = pos.identity.to_json_dict()
    d["postion"] = pos.position.to_json_dict()  # sic: Canal's spelling
    return d


def log_position_from_dict(d: dict[str, Any]) -> LogPosition:
    return LogPosition(identity=LogIdentity.from_json_dict(d.get("identity") or {}),
                       position=EntryPosition.from_json_dict(d.get("postion") or d.get("position") or {}))


@dataclass(frozen=True, slots=True)
class PositionRange:
    """The positions an outstanding batch covers (Canal's PositionRange<LogPosition>).

    ``ack`` is where the client cursor moves when the batch is acked: the end of the last complete
    transaction (or DDL) in the batch; None when the batch ends inside a transaction, and then an ack moves
    no cursor (as in Canal). ``end_seq`` is the ring-buffer sequence of the last event (Canal: -1 = unknown).
    """

    start: LogPosition
    ack: LogPosition | None
    end: LogPosition
    end_seq: int = -1

    def to_json_dict(self, *, with_type: bool = False) -> dict[str, Any]:
        # fastjson's WriteClassName (ZooKeeper marks) tags the root and each generic-typed LogPosition field
        d: dict[str, Any] = {"@type": POSITION_RANGE_TYPE} if with_type else {}
        if self.ack is not None:
            d["ack"] = log_position_dict(self.ack, with_type=with_type)
        d["end"] = log_position_dict(self.end, with_type=with_type)
        d["endSeq"] = self.end_seq
        d["start"] = log_position_dict(self.start, with_type=with_type)
        return d

    def to_json(self, *, with_type: bool = False) -> str:
        return dumps(self.to_json_dict(with_type=with_type))

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> PositionRange:
        ack = d.get("ack")
        end_seq = d.get("endSeq")
        return cls(start=log_position_from_dict(d.get("start") or {}),
                   ack=log_position_from_dict(ack) if ack else None,
                   end=log_position_from_dict(d.get("end") or {}),
                   end_seq=-1 if end_seq is None else int(end_seq))

    @classmethod
    def from_json(cls, text: str | bytes) -> PositionRange:
        return cls.from_json_dict(json.loads(text))


# ---- meta.dat (FileMixedMetaManager's FileMetaInstanceData) -------------------------------------------

def encode_meta_file(destination: str, clients: list[tuple[ClientIdentity, LogPosition | None]]) -> bytes:
    """``{"clientDatas":[{"clientIdentity":{...},"cursor":{...}}],"destination":"..."}``; a client without
    a cursor has no "cursor" key (fastjson omits nulls). Order of ``clients`` is kept (subscription order)."""
    datas: list[dict[str, Any]] = []
    for client, cursor in clients:
        item: dict[str, Any] = {"clientIdentity": client.to_json_dict()}
        if cursor is not None:
            item["cursor"] = log_position_dict(cursor)
        datas.append(item)
    return dumps({"clientDatas": datas, "destination": destination}).encode("utf-8")


def decode_meta_file(data: bytes | str, destination: str) -> list[tuple[ClientIdentity, LogPosition | None]]:
    """The clients of ``destination`` in a meta.dat written by Canal or by us. Entries of another destination
    are ignored, as Canal's loader does. Raises ValueError/TypeError/KeyError on malformed content."""
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    if not data.strip():
        return []
    root = json.loads(data)
    if root is None:
        return []
    if not isinstance(root, dict):
        raise ValueError("the top level is not a JSON object")
    out: list[tuple[ClientIdentity, LogPosition | None]] = []
    for item in root.get("clientDatas") or []:
        ident = item.get("clientIdentity")
        if not ident:
            continue
        client = ClientIdentity.from_json_dict(ident)
        if client.destination != destination:
            continue
        cur = item.get("cursor")
        out.append((client, log_position_from_dict(cur) if cur else None))
    return out

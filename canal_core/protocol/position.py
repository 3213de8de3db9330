"""Binlog positions as Canal stores them: EntryPosition, LogIdentity and LogPosition, with Canal's JSON
(the meta managers, the parse position and ZooKeeper all persist these)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, order=True)
class EntryPosition:
    """A point in a source's binlog: Canal's EntryPosition (note Canal's JSON key "postion")."""

    journal_name: str = ""
    position: int = 0
    server_id: int | None = None
    timestamp: int | None = None  # ms since the epoch
    gtid: str = ""
    included: bool = False  # Canal: whether the event at this position was already consumed

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gtid": self.gtid, "included": self.included, "journalName": self.journal_name,
                               "position": self.position}
        if self.server_id is not None:
            out["serverId"] = self.server_id
        if self.timestamp is not None:
            out["timestamp"] = self.timestamp
        return out

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> EntryPosition:
        return cls(journal_name=d.get("journalName") or "", position=int(d.get("position") or 0),
                   server_id=d.get("serverId"), timestamp=d.get("timestamp"), gtid=d.get("gtid") or "",
                   included=bool(d.get("included", False)))


@dataclass(frozen=True, slots=True)
class LogIdentity:
    """Which source a position belongs to: Canal's LogIdentity (sourceAddress + slaveId)."""

    address: str = "127.0.0.1"
    port: int = 3306
    slave_id: int = -1

    def to_json_dict(self) -> dict[str, Any]:
        return {"slaveId": self.slave_id, "sourceAddress": {"address": self.address, "port": self.port}}

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> LogIdentity:
        src = d.get("sourceAddress") or {}
        return cls(address=src.get("address", ""), port=int(src.get("port", 0)), slave_id=int(d.get("slaveId", -1)))


LOG_POSITION_TYPE = "com.alibaba.otter.canal.protocol.position.LogPosition"


@dataclass(frozen=True, slots=True)
class LogPosition:
    """Canal's LogPosition: identity + position. JSON exactly as Canal writes it (with "@type" where
    Java readers need it: ZooKeeper cursors)."""

    identity: LogIdentity
    position: EntryPosition

    def to_json(self, *, with_type: bool = False) -> str:
        d: dict[str, Any] = {}
        if with_type:
            d["@type"] = LOG_POSITION_TYPE
        d["identity"] = self.identity.to_json_dict()
        d["postion"] = self.position.to_json_dict()  # sic: Canal's historical spelling
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> LogPosition:
        d = json.loads(text)
        return cls(identity=LogIdentity.from_json_dict(d.get("identity") or {}),
                   position=EntryPosition.from_json_dict(d.get("postion") or d.get("position") or {}))

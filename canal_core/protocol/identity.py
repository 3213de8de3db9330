"""Who a client is: Canal's ClientIdentity (destination, clientId and the subscription filter)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DEFAULT_CLIENT_ID = 1001  # what Canal's clients use unless told otherwise


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Canal's ClientIdentity. Equality and hashing use (destination, client_id) only, as in Canal: a client
    that subscribes again with another filter is the same client (its cursor and batches carry over)."""

    destination: str
    client_id: int = DEFAULT_CLIENT_ID
    filter: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        # Canal's clientId is a Java short; a wider value could not round-trip through a Java reader
        if not -32768 <= self.client_id <= 32767:
            raise ValueError(f"clientId {self.client_id} is out of range (Canal stores it as a 16-bit short)")

    def with_filter(self, filter: str) -> ClientIdentity:
        return ClientIdentity(self.destination, self.client_id, filter)

    def __str__(self) -> str:
        # Canal's toString (reflection, CanalToStringStyle): appears in "should subscribe first"
        return f"ClientIdentity[destination={self.destination},clientId={self.client_id},filter={self.filter}]"

    def to_json_dict(self) -> dict[str, Any]:
        return {"clientId": self.client_id, "destination": self.destination, "filter": self.filter}

    def to_json(self) -> str:
        return json.dumps(self.to_json_dict(), separators=(",", ":"), ensure_ascii=False)  # fastjson's form

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> ClientIdentity:
        return cls(destination=str(d.get("destination") or ""), client_id=int(d.get("clientId", DEFAULT_CLIENT_ID)),
                   filter=d.get("filter") or "")

    @classmethod
    def from_json(cls, text: str | bytes) -> ClientIdentity:
        return cls.from_json_dict(json.loads(text))

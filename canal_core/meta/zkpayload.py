"""What Canal's ZooKeeper nodes hold: cursor and running-node payloads, as fastjson writes them."""

from __future__ import annotations

import json
from typing import Any

from ..protocol.position import LogPosition
from .errors import MetaStoreError
from .model import dumps, log_position_dict, log_position_from_dict


def encode_cursor(position: LogPosition) -> bytes:
    """The cursor node's payload: fastjson with WriteClassName (Java readers need "@type")."""
    return dumps(log_position_dict(position, with_type=True)).encode("utf-8")


def decode_cursor(data: bytes, *, where: str) -> LogPosition | None:
    if not data or not data.strip():
        return None
    try:
        return log_position_from_dict(json.loads(data))
    except (ValueError, TypeError, AttributeError) as e:
        raise MetaStoreError(f"cannot parse the cursor in ZooKeeper {where}: {e}; fix or delete the node "
                             f"(the client then restarts from the configured position)") from e


def encode_server_running(address: str, *, active: bool = True, cid: int | None = None) -> bytes:
    """ServerRunningData as fastjson writes it: keys sorted, a null cid omitted."""
    d: dict[str, Any] = {"active": active, "address": address}
    if cid is not None:
        d["cid"] = cid
    return dumps(d).encode("utf-8")


def encode_client_running(address: str, client_id: int, *, active: bool = True) -> bytes:
    """ClientRunningData: {"active":true,"address":"ip:port","clientId":1001}."""
    return dumps({"active": active, "address": address, "clientId": client_id}).encode("utf-8")


def decode_running(data: bytes | None) -> dict[str, Any]:
    """A running node's JSON (server or client); {} when empty or unreadable (a foreign writer)."""
    if not data:
        return {}
    try:
        d = json.loads(data)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def split_address(address: str) -> tuple[str, int] | None:
    """"ip:port" -> (ip, port); None when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)

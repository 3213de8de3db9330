"""ZooKeeper payloads and paths as Canal writes them (docs/canal-compat.md §2), and the config rules of the
ZooKeeper meta (no ZooKeeper needed here; tests/integration/test_zookeeper_meta.py uses a real one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from canal_core.instance.config import CanalConfig, ConfigError, MetaMode
from canal_core.instance.instance import CanalInstance
from canal_core.meta import Fence, FencedError, PeriodMixedMetaManager, PositionRange
from canal_core.meta.errors import MetaStoreError
from canal_core.meta.model import log_position_from_dict
from canal_core.meta.zkclient import connect
from canal_core.meta.zkpayload import (
    decode_cursor,
    decode_running,
    encode_client_running,
    encode_cursor,
    encode_server_running,
    split_address,
)
from canal_core.parse.position import encode_position
from canal_core.protocol.position import LOG_POSITION_TYPE, EntryPosition, LogIdentity, LogPosition
from canal_core.protocol.zkpaths import (
    InvalidDestinationError,
    client_path,
    client_running_path,
    cluster_path,
    cursor_path,
    destination_cluster_path,
    destination_path,
    filter_path,
    mark_path,
    parse_path,
    server_running_path,
)

# docs/canal-compat.md §2's cursor example, verbatim: a cursor node as a Java Canal writes it
CANAL_CURSOR = (
    '{"@type":"com.alibaba.otter.canal.protocol.position.LogPosition","identity":{"slaveId":-1,"sourceAddress":'
    '{"address":"localhost","port":3306}},"postion":{"gtid":"","included":false,"journalName":"mysql-bin.000004",'
    '"position":13885,"serverId":1,"timestamp":1591600659000}}'
)


def _key_paths(obj: Any, prefix: str = "") -> list[str]:
    """Every key with its path, in document order: equal lists mean equal key order at every level."""
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append(prefix + k)
            out += _key_paths(v, prefix + k + ".")
    return out


def test_cursor_json_is_canals_example() -> None:
    example = CANAL_CURSOR
    parsed = json.loads(example)
    pos = log_position_from_dict(parsed)
    assert pos == LogPosition(LogIdentity("localhost", 3306, -1),
                              EntryPosition("mysql-bin.000004", 13885, 1, 1591600659000, "", False))
    ours = encode_cursor(pos)
    assert json.loads(ours) == parsed
    assert _key_paths(json.loads(ours)) == _key_paths(parsed)  # the same keys in Canal's order
    assert ours == example.encode()  # byte for byte, compact as fastjson writes it
    assert ours.startswith(b'{"@type":"com.alibaba.otter.canal.protocol.position.LogPosition",')
    assert b'"postion":' in ours and b'"position":{' not in ours  # Canal's historical misspelling


def test_cursor_json_omits_nulls_and_reads_back() -> None:
    pos = LogPosition(LogIdentity("10.0.0.1", 3307, 9), EntryPosition("", 0, None, None, "0-1-42", True))
    d = json.loads(encode_cursor(pos))
    assert "serverId" not in d["postion"] and "timestamp" not in d["postion"]
    assert decode_cursor(encode_cursor(pos), where="x") == pos
    assert decode_cursor(b"", where="x") is None
    with pytest.raises(MetaStoreError, match="cannot parse the cursor in ZooKeeper /p"):
        decode_cursor(b"{not json", where="/p")


def test_parse_position_payload_has_no_type() -> None:
    example = json.loads(CANAL_CURSOR)
    pos = log_position_from_dict(example)
    del example["@type"]
    assert json.loads(encode_position(pos)) == example
    assert _key_paths(json.loads(encode_position(pos))) == _key_paths(example)


def test_mark_json_tags_every_position_with_its_class() -> None:
    p = LogPosition(LogIdentity("localhost", 3306, -1), EntryPosition("mysql-bin.000001", 4, 1, 1000))
    d = json.loads(PositionRange(p, p, p, 7).to_json(with_type=True))
    assert list(d) == ["@type", "ack", "end", "endSeq", "start"]
    assert d["@type"] == "com.alibaba.otter.canal.protocol.position.PositionRange"
    assert {d[k]["@type"] for k in ("ack", "end", "start")} == {LOG_POSITION_TYPE}
    assert PositionRange.from_json(json.dumps(d)) == PositionRange(p, p, p, 7)


def test_running_payloads() -> None:
    assert encode_server_running("10.20.144.51:11111") == b'{"active":true,"address":"10.20.144.51:11111"}'
    assert encode_server_running("1.2.3.4:1", cid=7) == b'{"active":true,"address":"1.2.3.4:1","cid":7}'
    assert (encode_client_running("10.0.0.7:5000", 1001)
            == b'{"active":true,"address":"10.0.0.7:5000","clientId":1001}')
    assert decode_running(b'{"active":false,"address":"a:1"}') == {"active": False, "address": "a:1"}
    assert decode_running(b"garbage") == {} and decode_running(None) == {}
    assert split_address("10.0.0.1:11111") == ("10.0.0.1", 11111)
    assert split_address("[::1]:11111") == ("::1", 11111)
    assert split_address("nohost") is None and split_address("h:port") is None


def test_paths_are_canals() -> None:
    assert client_path("example", 1001) == "/otter/canal/destinations/example/1001"
    assert filter_path("example", 1001) == "/otter/canal/destinations/example/1001/filter"
    assert cursor_path("example", 1001) == "/otter/canal/destinations/example/1001/cursor"
    assert mark_path("example", 1001, 12) == "/otter/canal/destinations/example/1001/mark/0000000012"
    assert parse_path("example") == "/otter/canal/destinations/example/parse"
    assert server_running_path("example") == "/otter/canal/destinations/example/running"
    assert client_running_path("example", 1001) == "/otter/canal/destinations/example/1001/running"
    assert destination_cluster_path("example", "1.2.3.4:11111") == \
        "/otter/canal/destinations/example/cluster/1.2.3.4:11111"
    assert cluster_path("1.2.3.4:11111") == "/otter/canal/cluster/1.2.3.4:11111"
    with pytest.raises(InvalidDestinationError, match="invalid destination name 'a/b' for ZooKeeper"):
        destination_path("a/b")


def test_fence_refuses_locally_when_not_held() -> None:
    f = Fence("example")
    with pytest.raises(FencedError, match="destination example: this server is not the active one"):
        f.require()
    f.hold(3)
    pinned = f.pinned()
    f.release()
    assert f.version is None and pinned.version == 3 and pinned.require() == 3


def _conf(tmp: Path, canal: str, instance: str = "") -> Path:
    conf = tmp / "conf"
    (conf / "example").mkdir(parents=True)
    (conf / "canal.properties").write_text(canal)
    (conf / "example" / "instance.properties").write_text(instance)
    return conf


def test_default_instance_xml_needs_zk_servers(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "canal.instance.global.spring.xml = classpath:spring/default-instance.xml\n")
    with pytest.raises(ConfigError, match=r"canal\.zkServers is not set") as e:
        CanalConfig.load(conf, env={})
    assert e.value.key == "canal.zkServers"


def test_per_destination_default_instance_needs_zk_servers(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "canal.instance.example.spring.xml = classpath:spring/default-instance.xml\n")
    canal = CanalConfig.load(conf, env={})  # the global file-instance.xml needs nothing
    with pytest.raises(ConfigError, match=r"instance\.properties: .*canal\.zkServers is not set") as e:
        canal.instance("example")
    assert e.value.key == "canal.zkServers"


def test_default_instance_xml_builds_period_mixed_meta(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "canal.instance.global.spring.xml = classpath:spring/default-instance.xml\n"
                           "canal.zkServers = 127.0.0.1:1/canal\n"
                           "canal.zookeeper.flush.period = 250\n"
                           "canal.zookeeper.session.timeout = 4000\n",
                 "canal.instance.master.address = 127.0.0.1:3306\n")
    canal = CanalConfig.load(conf, env={})
    inst_cfg = canal.instance("example")
    assert inst_cfg.meta_mode is MetaMode.PERIOD_MIXED and inst_cfg.zookeeper_session_timeout == 4000
    assert canal.zookeeper_session_timeout == 4000
    fence = Fence("example")
    inst = CanalInstance.from_config(canal, inst_cfg, fence=fence)
    meta = inst.meta
    assert isinstance(meta, PeriodMixedMetaManager)
    assert meta.flush_period_ms == 250 and meta.zookeeper._writer.fences == {"example": fence}
    # building connects nothing (the server above does not exist); start() connects, and a server that does not
    # answer is an error naming the key
    with pytest.raises(MetaStoreError, match=r"cannot connect to ZooKeeper 127\.0\.0\.1:1/canal \(canal\.zkS"):
        connect("127.0.0.1:1/canal", session_timeout_ms=4000, timeout=0.5)

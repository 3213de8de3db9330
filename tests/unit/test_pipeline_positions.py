"""Binlog positions in the pipeline: one text form (``file:offset``), one parser, and a replay bound that is
either a Position or an EventTime, never a bare number."""

from __future__ import annotations

import pytest

from canal_core.parse.filter import EventFilter
from canal_core.parse.parser import ParserConfig, SourceConfig
from pipelines.engine.replay import ReplaySource, replay_entries
from pipelines.engine.sensor_state import position_key
from pipelines.engine.window import Position, format_position, key_text, order_key, parse_position


def test_text_form_round_trips() -> None:
    assert parse_position("mysql-bin.000012:4567") == Position("mysql-bin.000012", 4567)
    assert format_position(Position("mysql-bin.000012", 4567, timestamp_ms=5, gtid="0-1-2")) == "mysql-bin.000012:4567"
    assert parse_position("host:3306-bin.000001:4") == Position("host:3306-bin.000001", 4)  # the last colon splits
    assert key_text(order_key("mysql-bin.000002", 6039762), "mysql-bin.000001") == "mysql-bin.000002:6039762"


@pytest.mark.parametrize("text", ["mysql-bin.000012", "mysql-bin.000012:", ":4", "mysql-bin.000012:-1",
                                  "mysql-bin.000012:4a"])
def test_malformed_text_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="expected file:offset") as err:
        parse_position(text)
    assert repr(text) in str(err.value)


def test_sensor_state_reads_positions_with_the_same_parser() -> None:
    assert position_key("mysql-bin.000001:150") == 1 << 32 | 150
    with pytest.raises(ValueError, match=r"'mysql-bin\.000001': expected file:offset"):
        position_key("mysql-bin.000001")


@pytest.mark.parametrize("bounds", [{"start": 1_700_000_000_000},
                                    {"start": Position("mysql-bin.000001", 4), "end": 1_700_000_000_000}])
def test_a_replay_bound_that_is_a_bare_number_is_refused(bounds: dict[str, object]) -> None:
    # refused before any connection is tried: port 1 has no server
    source = ReplaySource(ParserConfig(destination="positions", master=SourceConfig("127.0.0.1", 1, "u", "p")),
                          EventFilter())
    with pytest.raises(TypeError, match="expected a Position or an EventTime"):
        list(replay_entries(source, **bounds))  # type: ignore[arg-type]


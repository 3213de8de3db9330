"""The chaos suite's checks and fault plan (tests/chaos) on hand-made inputs: each difference it must report is
reported, and equal inputs pass."""

import itertools
import random

from tests.chaos.binlog_truth import Change
from tests.chaos.faults import KINDS, Kind, plan
from tests.chaos.verify import _compare_rows, check_workload, compare_changelog
from tests.chaos.workload import ROLLBACK_MARK

F = "mysql-bin.000001"


def _change(offset: int, row: int = 0, op: str = "INSERT", after: str = "1", gtid: str = "0-1-1") -> Change:
    return Change(F, offset, row, "accounts", op, gtid, None, {"id": after})


def _stored(c: Change, **over: object) -> dict[str, object]:
    r: dict[str, object] = {"binlog_file": c.file, "binlog_offset": c.offset, "row": c.row, "table_name": c.table,
                            "op": c.op, "before": c.before, "after": c.after}
    r.update(over)
    return r


def test_the_changelog_equal_to_the_binlog_passes() -> None:
    truth = [_change(100), _change(100, 1, after="2"), _change(200, op="INSERT", after="3")]
    res = compare_changelog([_stored(c) for c in truth], truth)
    assert res.ok and (res.expected, res.stored) == (3, 3)


def test_the_changelog_missing_doubled_foreign_and_altered_changes_are_each_counted() -> None:
    truth = [_change(100), _change(200, after="2"), _change(300, after="3"), _change(400, after="4")]
    stored = [_stored(truth[0]), _stored(truth[0]),                 # doubled
              _stored(truth[1], after={"id": "22"}),                # altered image
              _stored(truth[2]),
              _stored(_change(999, after="9"))]                     # not in the binlog range; truth[3] missing
    res = compare_changelog(stored, truth)
    assert (res.missing, res.duplicated, res.phantom, res.corrupted) == (1, 1, 1, 1)
    assert not res.ok and len(res.examples) == 4


def test_mirror_rows_by_key_and_as_a_multiset() -> None:
    src = [(1, "a"), (2, "b"), (3, "c")]
    same = _compare_rows("t", src, list(src), [0])
    assert same.mismatched == 0
    res = _compare_rows("t", src, [(1, "a"), (2, "x"), (2, "x"), (4, "d")], [0])
    assert (res.missing, res.differing, res.extra) == (1, 1, 2)   # 3 missing; 2 differs; 2 twice and 4 extra
    multi = _compare_rows("k", [(1,), (1,), (2,)], [(1,), (2,), (2,)], None)
    assert (multi.missing, multi.extra) == (1, 1)                  # one copy of (1,) lost, one of (2,) more


def test_the_workload_log_against_the_binlog() -> None:
    truth = [_change(100, gtid="0-1-5"), _change(100, 1, gtid="0-1-5"), _change(200, gtid="0-1-6")]
    log = [{"n": 1, "kind": "open", "outcome": "committed", "rows": 2, "gtid": "0-1-5"},
           {"n": 2, "kind": "open", "outcome": "unknown"},
           {"n": 3, "kind": "rollback", "outcome": "rolled_back", "rows": 4}]
    ok = check_workload(log, truth, [])
    assert ok.ok and ok.unknown_committed == 1                     # 0-1-6: the transaction of unknown outcome

    lost = check_workload([*log, {"n": 4, "kind": "open", "outcome": "committed", "rows": 1, "gtid": "0-1-7"}],
                          truth, [])
    assert lost.committed_missing == 1 and not lost.ok
    unexplained = check_workload(log[:1], truth, [])               # 0-1-6 committed by nobody the log knows
    assert unexplained.unexplained == 1 and not unexplained.ok
    trace = check_workload(log, truth, [{"before": None, "after": {"memo": ROLLBACK_MARK}}])
    assert trace.rollback_traces_changelog == 1 and not trace.ok


def test_the_plan_has_every_kind_once_then_random_and_ends_with_the_workload() -> None:
    p = plan(21, 600.0, random.Random(1))
    assert len(p) == 21 and {x.kind for x in p} == set(KINDS)
    assert all(a.at < b.at for a, b in itertools.pairwise(p)) and p[-1].at == 600.0 and p[0].at >= 20.0
    assert p == plan(21, 600.0, random.Random(1))                  # seeded
    few = plan(3, 120.0, random.Random(2), (Kind.DAEMON, Kind.WEBSERVER, Kind.CODE_SERVER, Kind.RUN_WORKER))
    assert len({x.kind for x in few}) == 3


def test_binlog_values_are_rendered_as_canal_texts() -> None:
    import datetime as dt
    from decimal import Decimal

    from tests.chaos.binlog_truth import _image

    enums = {"state": ["new", "done", "void"]}
    got = _image({"state": "done", "amount": Decimal("1.50"), "at": dt.datetime(2026, 1, 2, 3, 4, 5), "memo": None,
                  "owner": "Mia ☂"}, enums)
    assert got == {"state": "2", "amount": "1.50", "at": "2026-01-02 03:04:05", "memo": None, "owner": "Mia ☂"}
    assert _image(None, enums) is None

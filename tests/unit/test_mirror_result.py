"""What a mirror operation reports: run log lines are read by people, so no dataclass reprs."""

from __future__ import annotations

from pipelines.engine.lake import MirrorResult


def test_summary_reads_as_a_sentence() -> None:
    r = MirrorResult(inserted=3, updated=1, deleted=0, version=7)
    assert r.summary() == "3 inserted, 1 updated, 0 deleted, Delta version 7"
    assert "MirrorResult" not in r.summary()


def test_summary_names_skipped_parts_replans_and_the_reason() -> None:
    r = MirrorResult(skipped_parts=2, replans=1, reason="snapshot not ahead of the mirror")
    assert r.summary() == ("0 inserted, 0 updated, 0 deleted, no table, 2 part(s) already applied, "
                           "planned again 1 time(s) (snapshot not ahead of the mirror)")


def test_add_keeps_the_last_version_and_sums_the_counts() -> None:
    total = MirrorResult()
    total.add(MirrorResult(inserted=2, version=4, position=10))
    total.add(MirrorResult(deleted=1, version=5, position=12))
    assert (total.inserted, total.deleted, total.version, total.position) == (2, 1, 5, 12)

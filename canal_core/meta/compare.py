"""Ordering of client cursors, for "the parser restarts from the minimum cursor over subscribed clients".

Canal (CanalEventUtils.min) compares two LogPositions of the same source by journal name then offset, and
positions of different sources by timestamp. We keep that, with three refinements:

- journal names compare by their numeric suffix ("mysql-bin.999999" < "mysql-bin.1000000"), not as text;
- GTID mode: a cursor still carries the journal name and offset of the source it was read from, so two
  cursors of the same source compare by those. When journal names are missing (a cursor holding only a
  GTID set) or the sources differ (a failover: offsets of two servers are unrelated), the GTID sets are
  compared by containment: MySQL sets by inclusion, MariaDB positions domain by domain (every domain's
  sequence <=). Sets that neither contain the other are not ordered; then the timestamp decides;
- a missing timestamp counts as 0 (the earliest): restarting too early only redelivers, too late loses.

Ties return the first argument, as Canal does.
"""

from __future__ import annotations

import re

from ..binlog.gtid import GtidError, MariaGtidPosition, MySQLGtidSet
from ..protocol.position import EntryPosition, LogPosition

_JOURNAL_RE = re.compile(r"^(.*?)(\d+)$")


def journal_key(name: str) -> tuple[str, int, str]:
    """Sort key of a binlog file name: (base, sequence number, name)."""
    m = _JOURNAL_RE.match(name)
    if not m:
        return (name, -1, name)
    return (m.group(1), int(m.group(2)), name)


def _gtid_le(a: str, b: str) -> bool | None:
    """a <= b as GTID positions (a contained in b); None when the two cannot be ordered."""
    try:
        if ":" in a or ":" in b:  # MySQL: uuid:intervals
            sa, sb = MySQLGtidSet(a), MySQLGtidSet(b)
            if sa.issubset(sb):
                return True
            return False if sb.issubset(sa) else None
        ma, mb = MariaGtidPosition(a), MariaGtidPosition(b)
    except GtidError:
        return None
    a_le = all((g := mb.get(d)) is not None and q <= g[1] for d, _, q in ma.gtids())
    b_le = all((g := ma.get(d)) is not None and q <= g[1] for d, _, q in mb.gtids())
    if a_le:
        return True
    return False if b_le else None


def _cmp_gtid(a: EntryPosition, b: EntryPosition) -> int | None:
    if not a.gtid or not b.gtid:
        return None
    le = _gtid_le(a.gtid, b.gtid)
    if le is None:
        return None
    if le:
        return 0 if _gtid_le(b.gtid, a.gtid) else -1
    return 1


def compare_positions(a: LogPosition, b: LogPosition) -> int:
    """-1, 0 or 1 as ``a`` is before, at, or after ``b`` (see the module's rules)."""
    pa, pb = a.position, b.position
    if a.identity == b.identity and pa.journal_name and pb.journal_name:
        ka, kb = journal_key(pa.journal_name), journal_key(pb.journal_name)
        if ka[0] == kb[0] and ka[1] != kb[1]:
            return -1 if ka[1] < kb[1] else 1
        if ka[0] != kb[0] and pa.journal_name != pb.journal_name:
            return -1 if pa.journal_name < pb.journal_name else 1
        return (pa.position > pb.position) - (pa.position < pb.position)
    by_gtid = _cmp_gtid(pa, pb)
    if by_gtid is not None:
        return by_gtid
    ta, tb = pa.timestamp or 0, pb.timestamp or 0
    return (ta > tb) - (ta < tb)


def min_position(a: LogPosition, b: LogPosition) -> LogPosition:
    """The earlier of two positions; ``a`` on a tie (Canal's CanalEventUtils.min)."""
    return b if compare_positions(a, b) > 0 else a

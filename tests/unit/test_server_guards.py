"""The sans-IO guards of canal-server: the per-address auth backoff and the log line rules (escaping, rate
limits, rotation)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from canal_core.server.logs import LineFormatter, LogLimiter, escape_controls, peer_text, setup_server_logging
from canal_core.server.throttle import AuthThrottle, peer_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_per_failure_up_to_the_maximum() -> None:
    t = AuthThrottle(0.25, 10.0)
    assert [t.backoff(k) for k in range(8)] == [0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert t.backoff(10_000) == 10.0
    assert AuthThrottle(0.0, 10.0).backoff(5) == 0.0


def test_admit_waits_out_the_backoff_and_a_success_clears_it() -> None:
    clock = Clock()
    t = AuthThrottle(1.0, 4.0, clock=clock)
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        clock.now += seconds
        return False

    assert t.admit("10.0.0.1", clock.now + 60, wait) and waits == []  # no failure yet: at once
    assert t.failed("10.0.0.1") == 1
    assert t.admit("10.0.0.1", clock.now + 60, wait) and waits == [1.0]
    assert t.failed("10.0.0.1") == 2
    assert t.admit("10.0.0.1", clock.now + 60, wait) and waits == [1.0, 2.0]
    assert t.admit("10.0.0.2", clock.now + 60, wait) and len(waits) == 2  # another address is not held
    t.failed("10.0.0.1")  # 3 failures: the next attempt 4 s after the last one began
    assert not t.admit("10.0.0.1", clock.now + 1, wait)  # beyond the caller's deadline: refused, no wait
    assert len(waits) == 2
    t.succeeded("10.0.0.1")
    assert t.failures("10.0.0.1") == 0 and t.admit("10.0.0.1", clock.now, wait) and len(waits) == 2


def test_parallel_attempts_of_a_failing_address_take_turns() -> None:
    clock = Clock()
    t = AuthThrottle(1.0, 8.0, clock=clock)
    t.failed("h")
    clock.now += 5
    assert t.admit("h", clock.now + 60, lambda s: True)  # the backoff is over: one attempt let through
    # a second connection of the same address meanwhile waits (here gives up) instead of trying in parallel
    assert not t.admit("h", clock.now + 60, lambda s: True)


def test_a_wait_that_gives_up_refuses() -> None:
    clock = Clock()
    t = AuthThrottle(1.0, 8.0, clock=clock)
    t.failed("h")
    assert not t.admit("h", clock.now + 60, lambda s: True)  # e.g. the connection closed while waiting


def test_failures_are_forgotten_and_the_table_is_bounded() -> None:
    clock = Clock()
    t = AuthThrottle(1.0, 2.0, forget=30.0, max_peers=100, clock=clock)
    for i in range(1000):
        t.failed(f"10.0.{i // 250}.{i % 250}")
    assert len(t) == 100 and t.failures("10.0.3.249") == 1 and t.failures("10.0.0.0") == 0
    clock.now += 32  # 30 s after its backoff ended
    assert t.failures("10.0.3.249") == 0


@pytest.mark.parametrize(("host", "key"), [
    ("192.0.2.7", "192.0.2.7"),
    ("::ffff:192.0.2.7", "192.0.2.7"),
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:bbbb::9%eth0", "2001:db8:1:2::/64"),
    ("not-an-ip", "not-an-ip"),
])
def test_peer_key(host: str, key: str) -> None:
    assert peer_key(host) == key


def test_control_characters_are_escaped_and_records_stay_one_line() -> None:
    assert escape_controls("a\nb\r\x1b[31m\x7f\u2028") == "a\\x0ab\\x0d\\x1b[31m\\x7f\\u2028"
    assert peer_text("u\nv") == "'u\\x0av'"
    assert peer_text("x" * 500, 10) == "'xxxxxxxxxx'...(500 characters)"
    fmt = LineFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("t", logging.WARNING, __file__, 1, "auth failed for user:%s", ("a\nINFO forged",),
                               None)
    assert fmt.format(record) == "WARNING auth failed for user:a\\x0aINFO forged"
    try:
        raise ValueError("bad\nINFO forged")
    except ValueError:
        import sys

        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    lines = fmt.format(record).splitlines()
    assert lines[0] == "ERROR failed" and all(line.startswith("\t") for line in lines[1:])
    assert "\tINFO forged" in lines  # the exception text's second line, indented like the rest


def test_limiter_per_key_total_and_suppressed_count() -> None:
    clock = Clock()
    lim = LogLimiter(per_key=2, total=3, period=60.0, max_keys=10, clock=clock)
    assert [lim.allow("a")[0] for _ in range(3)] == [True, True, False]
    assert lim.allow("b") == (True, 1)  # the total's last line says one was suppressed
    assert lim.allow("c") == (False, 0)
    clock.now += 60
    assert lim.allow("a") == (True, 1)
    for i in range(50):
        lim.allow(f"k{i}")
    assert len(lim._keys) <= 10


def test_server_log_files_rotate_by_size(tmp_path: Path) -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    logs = setup_server_logging(tmp_path, max_bytes=2000, backups=2)
    try:
        logs.resize(1000, 1)
        for i in range(200):
            logging.getLogger("canal_core.test").info("line %d %s", i, "x" * 50)
        files = sorted(p.name for p in (tmp_path / "canal").iterdir())
        assert files == ["canal.log", "canal.log.1"]
        assert all((tmp_path / "canal" / f).stat().st_size <= 1000 for f in files)
        assert "line 199" in (tmp_path / "canal" / "canal.log").read_text()
    finally:
        for h in root.handlers[:]:
            if h not in before:
                root.removeHandler(h)
                h.close()


def test_status_writer_survives_oserror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture) -> None:
    import errno

    from canal_core.server import main

    def refuse(path: Path, data: object) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(main, "_write_json", refuse)
    monkeypatch.setattr(main, "status_of", lambda ctl: {})
    limiter = LogLimiter(per_key=1, total=1)
    log = logging.getLogger("canal_core.server")
    with caplog.at_level(logging.WARNING, "canal_core.server"):
        for _ in range(5):  # every period: no exception, one line a minute
            main._write_status(tmp_path / "status.json", None, limiter, log)  # type: ignore[arg-type]
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot write {tmp_path / 'status.json'}: [Errno 24] Too many open files (serving on; next try in 2 s)"]

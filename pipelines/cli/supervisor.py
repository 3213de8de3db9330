"""Keeps the main job's processes running: each in a session of its own, restarted with backoff when it exits, and
stopped with everything it started (children their parent left behind included) at the end.

A service may depend on others' readiness (``after``): it is started only once they are all ready, and with
``stops_with`` it is also stopped while one of them is down (the Dagster daemon, its code server and the Spark
Connect server: see pipelines/cli/deployment.py). Backoff after an exit: 1, 2, 4 ... 60 s, back to 1 s once a
process ran for ``STABLE_SECONDS``. Everything is said on the terminal through ``say``.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..engine.processes import session_members, signal_all

STABLE_SECONDS = 60.0
MAX_BACKOFF_SECONDS = 60.0
POLL_SECONDS = 0.5


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


@dataclass
class Service:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None          # None: the supervisor's environment
    ready: Callable[[], bool] | None = None    # readiness probe; None: ready once started
    after: tuple[str, ...] = ()                # started only while these services are ready ...
    stops_with: bool = False                   # ... and stopped while one of them is not
    echo: bool = False                         # copy its output lines to the terminal (and the log)
    done_on_success: bool = False              # an exit with 0 is the end (not restarted)
    stop_seconds: float = 20.0                 # SIGTERM, then SIGKILL after this
    # state
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0                       # monotonic
    is_ready: bool = False
    done: bool = False
    failures: int = 0                          # exits in a row that came before STABLE_SECONDS
    restarts: int = 0
    stopped_for_dependency: bool = False
    next_start: float = 0.0
    sessions: list[int] = field(default_factory=list)  # every incarnation's session, while any member lives

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None


class Supervisor:
    def __init__(self, say: Callable[[str], None], cwd: Path) -> None:
        self.say = say
        self.cwd = cwd
        self.services: dict[str, Service] = {}
        self.born = time.time()  # nothing this supervisor started is older
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._hurry = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, service: Service) -> Service:
        self.services[service.name] = service
        return service

    # --- running ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.step()
            except Exception as e:  # keep supervising: one bad step must not leave the pipeline unwatched
                self.say(f"supervisor: {type(e).__name__}: {e}")
            self._stopping.wait(POLL_SECONDS)

    def step(self) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            for s in self.services.values():
                if s.proc is not None and s.proc.poll() is not None:
                    self._exited(s)
            for s in self.services.values():
                down = [d for d in s.after if not self.services[d].is_ready]
                if s.proc is not None:
                    if down and s.stops_with:
                        self.say(f"{s.name}: stopping while {' and '.join(down)} {'is' if len(down) == 1 else 'are'}"
                                 " down")
                        self._stop(s)
                        s.next_start, s.stopped_for_dependency = 0.0, True
                    elif not s.is_ready and (s.ready is None or s.ready()):
                        s.is_ready = True
                        if s.ready is not None:
                            self.say(f"{s.name} ready (pid {s.proc.pid}, after "
                                     f"{time.monotonic() - s.started:.1f} s)")
                elif not s.done and time.monotonic() >= s.next_start and not down:
                    self._spawn(s)

    def _exited(self, s: Service) -> None:
        assert s.proc is not None
        code = s.proc.returncode
        ran = time.monotonic() - s.started
        s.proc, s.is_ready = None, False
        if code == 0 and s.done_on_success:
            s.done = True
            self.say(f"{s.name} finished")
            return
        s.failures = 1 if ran >= STABLE_SECONDS else s.failures + 1
        delay = min(MAX_BACKOFF_SECONDS, 2.0 ** (s.failures - 1))
        s.next_start = time.monotonic() + delay
        s.restarts += 1
        self.say(f"{s.name} {describe_exit(code)} after {_duration(ran)}; restarting in {delay:g} s "
                 f"(restart {s.restarts}, log {s.log})")

    def _spawn(self, s: Service) -> None:
        s.log.parent.mkdir(parents=True, exist_ok=True)
        s.sessions = [sid for sid in s.sessions if session_members([sid], self.born)]
        out: IO[bytes] | int
        with open(s.log, "ab") as log:
            log.write(f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(s.argv)}\n".encode())
            log.flush()
            out = subprocess.PIPE if s.echo else log
            # a session of its own: every process it starts (run workers, their JVMs) stays in it, even orphaned
            s.proc = subprocess.Popen(s.argv, cwd=self.cwd, env=s.env, stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        s.started = time.monotonic()
        s.sessions.append(s.proc.pid)
        if s.restarts or s.stopped_for_dependency:
            self.say(f"{s.name} started again (pid {s.proc.pid})")
        s.stopped_for_dependency = False
        if s.echo:
            threading.Thread(target=self._relay, args=(s, s.proc), name=f"relay-{s.name}", daemon=True).start()

    def _relay(self, s: Service, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with open(s.log, "ab") as log:
            for raw in proc.stdout:
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").rstrip()
                if line:
                    self.say(f"{s.name}: {line}")
        proc.stdout.close()

    # --- stopping ---------------------------------------------------------------------------------------

    def _stop(self, s: Service) -> None:
        self._stop_all([s])

    def _stop_all(self, services: list[Service]) -> None:
        """SIGTERM every process of the services' sessions (old incarnations included), SIGKILL what is left after
        the largest stop_seconds (at once after a second signal: ``hurry``)."""
        sessions = [sid for s in services for sid in s.sessions]
        members = session_members(sessions, self.born)
        signal_all((p.pid for p in members), signal.SIGTERM)
        deadline = time.monotonic() + max((s.stop_seconds for s in services), default=0.0)
        while members and time.monotonic() < deadline and not self._hurry.is_set():
            time.sleep(0.2)
            members = session_members(sessions, self.born)
        if members:
            self.say("still running after SIGTERM, sending SIGKILL: " + ", ".join(str(p.pid) for p in members))
            signal_all((p.pid for p in members), signal.SIGKILL)
        for s in services:
            if s.proc is not None:
                try:
                    s.proc.wait(10)
                except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
                    pass
            s.proc, s.is_ready = None, False
            s.sessions = [sid for sid in s.sessions if session_members([sid], self.born)]

    def hurry(self) -> None:
        """A second stop request: do not wait for anything to exit gracefully."""
        self._hurry.set()

    def shutdown(self, stages: list[list[str]]) -> list[int]:
        """Stop supervising, then stop the services stage by stage (names; services in no stage last); returns the
        pids of every process of theirs still running afterwards (none unless something defies SIGKILL)."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(60)  # its step may be stopping a service (bounded by stop_seconds)
        with self._lock:
            named = [n for stage in stages for n in stage]
            rest = [n for n in self.services if n not in named]
            for stage in [*stages, rest]:
                self._stop_all([self.services[n] for n in stage if n in self.services])
            sessions = [sid for s in self.services.values() for sid in s.sessions]
            return [p.pid for p in session_members(sessions, self.born)]

    def pids(self) -> dict[str, int | None]:
        return {name: s.pid for name, s in self.services.items()}


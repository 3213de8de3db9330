"""canal-server: run the destinations of a conf directory.

    canal-server start  --conf conf [--run-dir DIR]   # in the background; pid file, logs
    canal-server run    --conf conf [--run-dir DIR]   # in the foreground
    canal-server stop   --conf conf [--run-dir DIR]   # SIGTERM: every meta manager flushes, then exit
    canal-server status --conf conf [--run-dir DIR]   # running (pid, destinations) or stopped; exit 0/1

The server speaks Canal's TCP protocol on canal.ip:canal.port (canal.serverMode = tcp), with
canal.user / canal.passwd; a port that cannot be bound, or canal.user without canal.passwd, fails the
start (exit code 1, the reason on stderr and in the log).

The run directory (default: <conf>/../logs, as Canal's layout) holds canal.pid, canal/canal.log (the
server's log), <destination>/<destination>.log (each destination's log; both rotated at
canal.log.file.max.bytes, canal.log.file.backups kept) and canal/status.json
(refreshed every few seconds: destinations, their state and the store/parser counters, the TCP address;
"parser" is the parser's health: connecting / streaming / retrying / stopped and the error holding it up).

With canal.zkServers set the server joins the HA cluster (docs/zookeeper.md): a destination runs here only
while ZooKeeper elects this server ("standby" otherwise); status.json's "ha" section says which server is
active and since when. ZooKeeper unreachable at start fails the start like a busy port.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..instance.config import ConfigError
from ..meta import MetaStoreError
from ..parse.position import write_atomically
from .controller import CanalController
from .logs import LogLimiter, setup_server_logging

STATUS_PERIOD = 2.0


def _run_dir(args: argparse.Namespace) -> Path:
    return Path(args.run_dir) if args.run_dir else Path(args.conf).resolve().parent / "logs"


def status_of(ctl: CanalController) -> dict[str, Any]:
    out: dict[str, Any] = {"pid": os.getpid(), "time": int(time.time() * 1000), "destinations": {}}
    if ctl.tcp_address is not None:
        host, port = ctl.tcp_address
        out["tcp"] = {"host": host, "port": port, "connections": ctl.tcp.session_count() if ctl.tcp else 0}
    for name in ctl.server.destinations():
        dest = ctl.server._destinations.get(name)
        if dest is None:
            continue
        st = dest.store.stats()
        parser = dest.parser
        out["destinations"][name] = {
            "state": "running" if parser is None or parser.running else "stopped",
            "last_error": str(parser.last_error) if parser is not None and parser.last_error else None,
            "parser": parser.health.to_dict() if parser is not None else None,
            "parsers": [p.health.to_dict() for p in dest.parsers],  # a group's, one per source
            "events": parser.events if parser is not None else 0,
            "entries": parser.entries if parser is not None else 0,
            "store": {"put_seq": st.put_seq, "get_seq": st.get_seq, "ack_seq": st.ack_seq,
                      "put_mem": st.put_mem, "ack_mem": st.ack_mem, "put_rows": st.put_rows,
                      "ack_rows": st.ack_rows, "blocking_time": st.blocking_time},
        }
    for name, err in list(ctl.failed.items()):
        out["destinations"][name] = {"state": "failed", "last_error": err}
    if ctl.ha:
        ha: dict[str, Any] = {"address": ctl.address, "zkServers": ctl.canal.zk_servers, "destinations": {}}
        for name, monitor in sorted(ctl.monitors.items()):
            since = ctl.active_since.get(name)
            ha["destinations"][name] = {"active": monitor.is_active, "running": monitor.active_address,
                                        "since": int(since * 1000) if since is not None else None}
            if name not in out["destinations"]:
                out["destinations"][name] = {"state": "standby", "running": monitor.active_address}
        out["ha"] = ha
    return out


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(data, indent=2).encode())


def _write_status(path: Path, ctl: CanalController, limiter: LogLimiter, log: logging.Logger) -> None:
    """status.json, or a (rate-limited) line saying why not: a full disk or the open-files limit (EMFILE)
    must not stop the server, which keeps serving and tries again next period."""
    try:
        _write_json(path, status_of(ctl))
    except OSError as e:
        limiter.log(log, logging.WARNING, "status", "cannot write %s: %s (serving on; next try in %g s)", path,
                    e, STATUS_PERIOD)


def run(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args)
    logs = setup_server_logging(run_dir)
    pid_file = run_dir / "canal.pid"
    log = logging.getLogger("canal_core.server")
    done = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        ctl = CanalController(args.conf, tcp=True)
    except ConfigError as e:
        log.error("canal-server cannot start: %s", e)
        print(f"canal-server: {e}", file=sys.stderr)
        return 1
    logs.resize(ctl.canal.log_file_max_bytes, ctl.canal.log_file_backups)
    limiter = LogLimiter(per_key=1, total=1, period=60.0)
    try:
        try:
            ctl.start()
        except OSError as e:
            host, port = ctl.tcp_address or ("", 0)
            msg = f"cannot listen on {host or '*'}:{port} (canal.ip / canal.port): {e}"
            log.error("canal-server cannot start: %s", msg)
            print(f"canal-server: {msg}", file=sys.stderr)
            return 1
        except (MetaStoreError, ConfigError) as e:  # ZooKeeper unreachable, no address to register
            log.error("canal-server cannot start: %s", e)
            print(f"canal-server: {e}", file=sys.stderr)
            return 1
        # written once serving: `canal-server start` waits for it, so a failed start is reported as such
        pid_file.write_text(str(os.getpid()))
        if ctl.ha:
            log.info("canal-server started as %s in the HA cluster of %s with %s", ctl.address,
                     ctl.canal.zk_servers, ", ".join(sorted(ctl.monitors)) or "no destination")
        else:
            log.info("canal-server started with %s", ", ".join(ctl.server.destinations()) or "no destination")
        status = run_dir / "canal" / "status.json"
        while not done.wait(STATUS_PERIOD):
            _write_status(status, ctl, limiter, log)
        _write_status(status, ctl, limiter, log)
    finally:
        ctl.stop()  # TCP server closed, then the meta managers flush (HA: then the running nodes are released)
        log.info("canal-server stopped")
        if _pid(run_dir) == os.getpid():
            pid_file.unlink(missing_ok=True)
    return 0


def _pid(run_dir: Path) -> int | None:
    try:
        pid = int((run_dir / "canal.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def start(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args)
    if (pid := _pid(run_dir)) is not None:
        print(f"canal-server: already running (pid {pid})", file=sys.stderr)
        return 1
    run_dir.mkdir(parents=True, exist_ok=True)
    out = open(run_dir / "canal.out", "ab")  # handed to the child, which keeps it open
    cmd = [sys.executable, "-m", "canal_core.server.main", "run", "--conf", str(args.conf), "--run-dir", str(run_dir)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if _pid(run_dir) == proc.pid:
            print(f"canal-server: started (pid {proc.pid}), logs in {run_dir}")
            return 0
        if proc.poll() is not None:
            print(f"canal-server: exited during start (code {proc.returncode}); see {run_dir / 'canal.out'}",
                  file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"canal-server: no pid file after 20 s; see {run_dir / 'canal.out'}", file=sys.stderr)
    return 1


def stop(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args)
    pid = _pid(run_dir)
    if pid is None:
        print("canal-server: not running", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            print(f"canal-server: stopped (pid {pid})")
            return 0
        time.sleep(0.1)
    print(f"canal-server: pid {pid} did not stop within 30 s", file=sys.stderr)
    return 1


def status(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args)
    pid = _pid(run_dir)
    if pid is None:
        print("canal-server: stopped")
        return 1
    tcp = ""
    try:
        st = json.loads((run_dir / "canal" / "status.json").read_text())
        dests = ", ".join(f"{n}={d.get('state')}" for n, d in st.get("destinations", {}).items())
        if st.get("tcp"):
            host = st["tcp"]["host"]
            tcp = f"; tcp {'*' if host in ('', '::', '0.0.0.0') else host}:{st['tcp']['port']}"
        if st.get("ha"):
            tcp += f"; HA as {st['ha'].get('address')} ({st['ha'].get('zkServers')})"
    except (FileNotFoundError, ValueError):
        dests = "(starting)"
    print(f"canal-server: running (pid {pid}): {dests}{tcp}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="canal-server", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["start", "run", "stop", "status"])
    ap.add_argument("--conf", default="conf", help="the conf directory holding canal.properties")
    ap.add_argument("--run-dir", help="pid file and logs (default: <conf>/../logs)")
    args = ap.parse_args(argv)
    return {"start": start, "run": run, "stop": stop, "status": status}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())

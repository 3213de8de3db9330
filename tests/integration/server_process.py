"""A real ``canal-server run`` process for tests and scripts that probe it from outside: a conf directory on
the private MariaDB, the process (optionally under a lowered open-files limit), its status.json, log, RSS, and
raw protocol helpers a hostile or an honest client needs."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canal_core.meta.zkpayload import decode_running
from canal_core.protocol.auth import scramble, stored_hash
from canal_core.protocol.proto import CanalProtocol_pb2 as cp
from canal_core.protocol.zkpaths import server_running_path
from tests.support.net import free_port
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from kazoo.client import KazooClient

REPO_ROOT = Path(__file__).resolve().parents[2]
CANAL_SERVER_BIN = Path(sys.executable).parent / "canal-server"   # the console script pip installed
USER = "canal"
PASSWORD = "hostile-secret"


def write_conf(root: Path, mysql_port: int, destinations: Mapping[str, str], *, canal_extra: str = "",
               password: str | None = PASSWORD) -> Path:
    """``root/conf`` for ``canal-server``: destination name -> its instance.properties lines after the source
    ones (at least the filter). TCP and metrics on free ports of 127.0.0.1; ``password`` None: no auth."""
    conf = root / "conf"
    conf.mkdir(parents=True)
    auth = f"canal.user = {USER}\ncanal.passwd = {stored_hash(password)}\n" if password else ""
    (conf / "canal.properties").write_text(
        f"canal.ip = 127.0.0.1\ncanal.port = {free_port()}\ncanal.metrics.pull.port = {free_port()}\n"
        f"canal.destinations = {','.join(destinations)}\ncanal.auto.scan = false\n"
        f"canal.file.data.dir = {root / 'data'}\ncanal.file.flush.period = 100\n" + auth + canal_extra)
    for name, extra in destinations.items():
        (conf / name).mkdir()
        (conf / name / "instance.properties").write_text(
            f"canal.instance.master.address = 127.0.0.1:{mysql_port}\n"
            "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n" + extra)
    return conf


def _property(conf: Path, key: str) -> str:
    for line in (conf / "canal.properties").read_text().splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() == key:
            return v.strip()
    raise KeyError(key)


@dataclass
class ServerProcess:
    conf: Path
    run: Path
    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", int(_property(self.conf, "canal.port"))

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{_property(self.conf, 'canal.metrics.pull.port')}/metrics"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def status(self) -> dict[str, Any]:
        try:
            return json.loads((self.run / "canal" / "status.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def connections(self) -> int | None:
        return self.status().get("tcp", {}).get("connections")

    def rss_mb(self) -> float:
        return _proc_status_kb(self.pid, "VmRSS") / 1024

    def peak_rss_mb(self) -> float:
        return _proc_status_kb(self.pid, "VmHWM") / 1024

    def log(self) -> str:
        path = self.run / "canal" / "canal.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def output(self) -> str:
        path = self.run / "canal.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code (negative: killed)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def _proc_status_kb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    raise KeyError(field)


def start_server(conf: Path, run: Path, *, nofile: int | None = None, timeout: float = 60,
                 wait_for: Callable[[ServerProcess], bool] | None = None) -> ServerProcess:
    """``canal-server run`` in the foreground of a child process; ``nofile``: its RLIMIT_NOFILE (soft and hard).
    Returns once the TCP port accepts and every destination runs (or ``wait_for`` holds)."""
    run.mkdir(parents=True, exist_ok=True)

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = open(run / "canal.out", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "canal_core.server.main", "run", "--conf", str(conf),
                             "--run-dir", str(run)], stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                            preexec_fn=limit, start_new_session=True)
    out.close()
    server = ServerProcess(conf, run, proc)
    names = [n.strip() for n in _property(conf, "canal.destinations").split(",")]
    ready = wait_for or (lambda s: all(s.status().get("destinations", {}).get(n, {}).get("state") == "running"
                                       for n in names))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise AssertionError(f"canal-server exited with {proc.returncode}: {server.output()[-3000:]}")
        if ready(server) and server.connections() is not None:
            return server
        time.sleep(0.1)
    server.stop()
    raise AssertionError(f"canal-server not ready within {timeout} s: {server.output()[-3000:]}")


class RestartableServer:
    """The installed ``canal-server`` console script on a conf dir, in the foreground as a child process that can be
    stopped and started again on the same conf and port; TIMESTAMP text in UTC (TZ)."""

    def __init__(self, conf: Path, run: Path) -> None:
        self.conf, self.run = conf, run
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, port: int) -> None:
        env = {**os.environ, "TZ": "UTC"}
        argv = [str(CANAL_SERVER_BIN), "run", "--conf", str(self.conf), "--run-dir", str(self.run)]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"canal-server exited {self.proc.returncode}; see {self.run}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"canal-server did not listen on {port} within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def running_address(zk: KazooClient, destination: str) -> str | None:
    """The address in the destination's running node in ZooKeeper (the active server of an HA pair); None between
    two servers."""
    try:
        return str(decode_running(zk.get(server_running_path(destination))[0]).get("address") or "") or None
    except Exception:  # no node (between two servers)
        return None


def wait(pred: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    return wait_until(pred, timeout, what, step=0.05)


# ---- Canal's wire protocol by hand, for clients that do what no connector would ---------------------------


def destination_running(run: Path, destination: str = "example", timeout: float = 30) -> bool:
    """Whether the server's status.json (under ``run``/canal) shows ``destination`` running within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = json.loads((run / "canal" / "status.json").read_text())
        except (FileNotFoundError, ValueError):
            status = {}
        if status.get("destinations", {}).get(destination, {}).get("state") == "running":
            return True
        time.sleep(0.1)
    return False


class RawClient:
    """A connection speaking Canal's framing directly. ``source``: the local address to connect from (any
    127.x.y.z on Linux), so that tests can play several client hosts."""

    def __init__(self, address: tuple[str, int], *, source: str | None = None, timeout: float = 10,
                 handshake: bool = True) -> None:
        self.sock = socket.create_connection(address, timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.seed = b""
        if handshake:
            hs = self.read(timeout)
            assert hs.type == cp.HANDSHAKE, hs
            self.seed = cp.Handshake.FromString(hs.body).seeds

    def send_packet(self, ptype: int, body: bytes = b"") -> None:
        data = cp.Packet(type=ptype, body=body).SerializeToString()
        self.sock.sendall(struct.pack(">i", len(data)) + data)

    def auth(self, password: str = PASSWORD, user: str = USER, **fields: Any) -> cp.Ack:
        token = scramble(password, self.seed).encode() if password else b""
        self.send_packet(cp.CLIENTAUTHENTICATION,
                         cp.ClientAuth(username=user, password=token, **fields).SerializeToString())
        return self.ack()

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("server closed the connection")
            buf += chunk
        return bytes(buf)

    def read(self, timeout: float = 10) -> cp.Packet:
        self.sock.settimeout(timeout)
        (n,) = struct.unpack(">i", self._exact(4))
        return cp.Packet.FromString(self._exact(n))

    def ack(self, timeout: float = 10) -> cp.Ack:
        p = self.read(timeout)
        assert p.type == cp.ACK, p
        return cp.Ack.FromString(p.body)

    def closed_by_server(self, timeout: float = 10) -> bool:
        """True once the server closed the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
        except TimeoutError:
            return False
        except OSError:
            return True
        return True

    def close(self) -> None:
        self.sock.close()

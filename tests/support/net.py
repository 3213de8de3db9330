"""Ports and a TCP proxy whose network can be cut, for tests that run servers or simulate partitions."""

from __future__ import annotations

import select
import socket
import threading
import time


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; a test binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CutProxy:
    """A TCP proxy to ``target`` whose network can be cut: while cut, no byte crosses in either direction and
    the peers see a silent network (no FIN, no RST). ``restore`` drops every connection made so far (bytes
    were lost on them: clients must reconnect) and forwards new ones again.

    ``hold_new``: while cut, a new connection is accepted and held without an upstream (the client waits for
    a handshake that never comes), else closed at once (the client's reconnect fails fast)."""

    def __init__(self, target: tuple[str, int], *, hold_new: bool) -> None:
        self.target = target
        self.hold_new = hold_new
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._cut = threading.Event()
        self._closing = threading.Event()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="cut-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                if self.hold_new:
                    with self._lock:
                        self._socks.append(down)
                else:
                    down.close()
                continue
            try:
                up = socket.create_connection(self.target, timeout=5)
            except OSError:
                down.close()
                continue
            with self._lock:
                self._socks += [down, up]
            for src, dst in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._closing.is_set():
                if self._cut.is_set():  # nothing is read: the sender's buffers fill as on a dead link
                    time.sleep(0.02)
                    continue
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready or self._cut.is_set():
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def cut(self) -> None:
        self._cut.set()

    def restore(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self._cut.clear()

    def close(self) -> None:
        self._closing.set()
        self.listener.close()
        self.restore()

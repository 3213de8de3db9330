"""Failed-authentication backoff per client address, so that nobody can guess passwords at network speed.

An address (IPv4, or the /64 of an IPv6 one) with no failure, or whose last failure is older than ``forget``
seconds, authenticates at once. After ``k`` consecutive failures its next attempt may be checked only
``min(delay x 2^(k-1), max_delay)`` seconds after the last one began, and one attempt at a time: once an
address has failed, parallel connections from it wait their turn instead of multiplying the rate. A success clears the
address (as MySQL's connection_control does). The table holds at most ``max_peers`` addresses; the least
recently failed ones are forgotten first, so a flood of addresses costs bounded memory.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_DELAY = 0.25  # s after the first failure
DEFAULT_MAX_DELAY = 10.0  # s, reached after 6 consecutive failures
DEFAULT_MAX_PEERS = 16384  # ~250 bytes each


def peer_key(host: str) -> str:
    """The throttled unit for a peer's address: IPv4 (also when mapped into IPv6) as is, IPv6 by its /64 (one
    host owns a whole /64 and can pick any address in it)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


@dataclass(slots=True)
class _Peer:
    failures: int = 0
    next_at: float = 0.0  # monotonic time before which no attempt of this peer is checked
    last: float = 0.0  # when its last attempt was let through


class AuthThrottle:
    """Thread-safe. ``admit(key, deadline, wait)`` before checking a password, then ``failed(key)`` or
    ``succeeded(key)``."""

    def __init__(self, delay: float = DEFAULT_DELAY, max_delay: float = DEFAULT_MAX_DELAY, *,
                 forget: float | None = None, max_peers: int = DEFAULT_MAX_PEERS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.delay = delay
        self.max_delay = max(max_delay, delay)
        self.forget = forget if forget is not None else max(60.0, 6 * self.max_delay)
        self.max_peers = max_peers
        self._clock = clock
        self._peers: OrderedDict[str, _Peer] = OrderedDict()
        self._lock = threading.Lock()

    def backoff(self, failures: int) -> float:
        """The wait after ``failures`` consecutive failures."""
        if failures <= 0 or self.delay <= 0:
            return 0.0
        return min(self.delay * 2 ** min(failures - 1, 62), self.max_delay)

    def admit(self, key: str, deadline: float, wait: Callable[[float], bool]) -> bool:
        """Wait (with ``wait(seconds)``, which returns True to give up, e.g. the connection closed) until
        ``key`` may try; False when that would be after ``deadline`` (monotonic) or the wait gave up."""
        while True:
            with self._lock:
                now = self._clock()
                peer = self._live(key, now)
                if peer is None:
                    return True
                if now >= peer.next_at:
                    # one attempt at a time: the next one waits at least this backoff, longer if this one fails
                    peer.last = now
                    peer.next_at = now + self.backoff(peer.failures)
                    return True
                at = peer.next_at
            if at > deadline or wait(at - now):
                return False

    def failed(self, key: str) -> int:
        """Count a failure; returns the address's consecutive failures."""
        with self._lock:
            now = self._clock()
            peer = self._live(key, now)
            if peer is None:
                peer = _Peer(last=now)
                self._peers[key] = peer
                while len(self._peers) > self.max_peers:
                    self._peers.popitem(last=False)
            self._peers.move_to_end(key)
            peer.failures += 1
            peer.next_at = max(peer.next_at, peer.last + self.backoff(peer.failures))
            return peer.failures

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._peers.pop(key, None)

    def failures(self, key: str) -> int:
        with self._lock:
            peer = self._live(key, self._clock())
            return peer.failures if peer is not None else 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._peers)

    def _live(self, key: str, now: float) -> _Peer | None:
        peer = self._peers.get(key)
        if peer is not None and now - max(peer.last, peer.next_at) > self.forget:
            del self._peers[key]
            return None
        return peer

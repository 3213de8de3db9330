"""Fixtures shared by the unit tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Two connected sockets (one end plays the peer), closed after the test."""
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()

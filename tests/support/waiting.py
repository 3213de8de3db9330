"""Polling for a condition in tests that watch another thread or process."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(cond: Callable[[], T], timeout: float, what: str = "condition", step: float = 0.02) -> T:
    """Poll ``cond`` every ``step`` s until it returns something true, and return that; fail the test after
    ``timeout`` s, naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not met within {timeout:g} s")
        time.sleep(step)


def wait_for(cond: Callable[[], object], timeout: float, step: float = 0.02) -> float:
    """``wait_until``, returning the monotonic time the condition held (for tests that time a hand-over)."""
    wait_until(cond, timeout, step=step)
    return time.monotonic()

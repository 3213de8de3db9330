"""Polling for a condition in tests that watch another thread or process."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_for(cond: Callable[[], bool], timeout: float, step: float = 0.02) -> float:
    """Poll ``cond`` every ``step`` s until it holds (returns the monotonic time it did); fail after ``timeout`` s."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(step)
    return time.monotonic()

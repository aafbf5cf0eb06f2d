"""Waiting in a test for the event it needs: poll a predicate until it holds.

A deadline is only a bound for a stuck run, never a speed assertion, so it is generous.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# An upper bound for events that come at once on an idle machine; a loaded CI machine may
# take many times longer, and a test waits for the event, not for this.
TIMEOUT = 30.0


def wait_for(predicate: Callable[[], T], timeout: float = TIMEOUT, interval: float = 0.01,
             message: str = "") -> T:
    """Call `predicate` until it returns something truthy and return that; fail with
    `message` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(message or f"condition not met within {timeout} s: {predicate}")
        time.sleep(interval)

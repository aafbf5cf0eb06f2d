"""Reconnect backoff with full jitter and the drain rate limiter. Pure: clocks are passed in."""

from __future__ import annotations

import random


class Backoff:
    """Exponential backoff with full jitter (a random delay in [0, min(cap, base * 2^n)])."""

    def __init__(self, initial: float, cap: float, rng: random.Random | None = None) -> None:
        self.initial = initial
        self.cap = cap
        self.attempt = 0
        self.rng = rng or random.Random()

    def next_delay(self) -> float:
        """The delay before the next attempt; each call widens the window."""
        ceiling = min(self.cap, self.initial * (2 ** min(self.attempt, 30)))
        self.attempt += 1
        return self.rng.uniform(0, ceiling)

    def reset(self) -> None:
        """A connection succeeded."""
        self.attempt = 0


class TokenBucket:
    """A rate limit of `rate` units per second with a burst of one second's worth."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.tokens = rate
        self.updated = now

    def wait_time(self, amount: float, now: float) -> float:
        """Seconds to wait before `amount` may be spent (0: now). Unlimited when rate is 0."""
        if self.rate <= 0:
            return 0.0
        self._refill(now)
        if self.tokens + 1e-9 >= min(amount, self.rate):  # tolerance: float refill steps
            return 0.0
        return (min(amount, self.rate) - self.tokens) / self.rate

    def spend(self, amount: float, now: float) -> None:
        """Take `amount` (may go negative for a single item larger than the burst)."""
        if self.rate <= 0:
            return
        self._refill(now)
        self.tokens -= amount

    def _refill(self, now: float) -> None:
        self.tokens = min(self.rate, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

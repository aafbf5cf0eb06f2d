"""Cutting a serial byte stream into frames, sans-I/O.

How this works: a framer is fed whatever bytes the port delivered (any split, one byte at a
time or many frames at once) and returns the complete frames found so far, without their
delimiter or markers; the incomplete rest stays buffered for the next feed. Bytes that can never
belong to a frame (before a start marker, or a frame longer than `max_frame`) are discarded
and counted in `dropped`, so garbage on the line costs a counter, never a wrong value.

- `LineFramer`: frames end with a delimiter (`\\n`, `\\r\\n`, ...).
- `FixedFramer`: every frame is exactly `length` bytes.
- `MarkerFramer`: a frame is what lies between a start marker and an end marker (STX/ETX).

Never imports asyncio, serial, socket or time.
"""

from __future__ import annotations

from typing import Protocol


class Framer(Protocol):
    """The common shape of the framers."""

    dropped: int

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the frames they completed."""
        ...

    def reset(self) -> int:
        """Forget buffered bytes (the port was reopened); returns how many were dropped."""
        ...


class LineFramer:
    """Frames terminated by `delimiter`; a line longer than `max_frame` is dropped."""

    def __init__(self, delimiter: bytes = b"\n", max_frame: int = 1024) -> None:
        if not delimiter:
            raise ValueError("delimiter must not be empty")
        self.delimiter = delimiter
        self.max_frame = max_frame
        self.dropped = 0
        self._buffer = b""
        self._discarding = False

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data
        frames: list[bytes] = []
        parts = buffer.split(self.delimiter)
        self._buffer = parts.pop()
        for part in parts:
            if self._discarding:
                self.dropped += len(part) + len(self.delimiter)
                self._discarding = False
            elif len(part) > self.max_frame:
                self.dropped += len(part) + len(self.delimiter)
            else:
                frames.append(part)
        # keep a tail that may still be the start of a delimiter; drop the rest of a long line
        keep = len(self.delimiter) - 1
        if len(self._buffer) > self.max_frame + keep:
            cut = len(self._buffer) - keep
            self.dropped += cut
            self._buffer = self._buffer[cut:]
            self._discarding = True
        return frames

    def reset(self) -> int:
        lost = len(self._buffer)
        self.dropped += lost
        self._buffer, self._discarding = b"", False
        return lost


class FixedFramer:
    """Frames of exactly `length` bytes (a device that never resynchronises needs markers)."""

    def __init__(self, length: int) -> None:
        if length < 1:
            raise ValueError("length must be at least 1")
        self.length = length
        self.dropped = 0
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data
        whole = len(buffer) - len(buffer) % self.length
        self._buffer = buffer[whole:]
        return [buffer[i:i + self.length] for i in range(0, whole, self.length)]

    def reset(self) -> int:
        lost = len(self._buffer)
        self.dropped += lost
        self._buffer = b""
        return lost


class MarkerFramer:
    """Frames between `start` and `end` markers; everything outside them is dropped."""

    def __init__(self, start: bytes, end: bytes, max_frame: int = 1024) -> None:
        if not start or not end:
            raise ValueError("start and end markers must not be empty")
        self.start, self.end, self.max_frame = start, end, max_frame
        self.dropped = 0
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data
        frames: list[bytes] = []
        while True:
            begin = buffer.find(self.start)
            if begin < 0:
                keep = min(len(buffer), len(self.start) - 1)  # a marker may be split
                self.dropped += len(buffer) - keep
                buffer = buffer[len(buffer) - keep:]
                break
            self.dropped += begin
            buffer = buffer[begin:]
            body_at = len(self.start)
            stop = buffer.find(self.end, body_at)
            restart = buffer.find(self.start, body_at)
            if 0 <= restart < stop or (stop < 0 and restart >= 0):
                # a new start before the end: the first frame was cut short
                self.dropped += restart
                buffer = buffer[restart:]
                continue
            if stop < 0:
                if len(buffer) - body_at > self.max_frame + len(self.end):
                    self.dropped += len(buffer)
                    buffer = b""
                break
            body = buffer[body_at:stop]
            buffer = buffer[stop + len(self.end):]
            if len(body) > self.max_frame:
                self.dropped += len(body) + len(self.start) + len(self.end)
            else:
                frames.append(body)
        self._buffer = buffer
        return frames

    def reset(self) -> int:
        lost = len(self._buffer)
        self.dropped += lost
        self._buffer = b""
        return lost


def make_framer(kind: str, delimiter: bytes = b"\n", length: int | None = None,
                start: bytes = b"", end: bytes = b"", max_frame: int = 1024) -> Framer:
    """The framer for a `framing` config value."""
    if kind == "line":
        return LineFramer(delimiter, max_frame)
    if kind == "fixed":
        return FixedFramer(length or 1)
    if kind == "markers":
        return MarkerFramer(start, end, max_frame)
    raise ValueError(f"unknown framing {kind!r}")

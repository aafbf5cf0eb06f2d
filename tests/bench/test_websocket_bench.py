"""Smoke test of the WebSocket benchmark: a short run against a real `outpost run`; every
message must arrive (the run raises otherwise). No figure is asserted."""

from __future__ import annotations

import re

import pytest

from bench import websocket


def test_a_short_run_delivers_every_message(capsys: pytest.CaptureFixture[str]) -> None:
    websocket.main(["--messages", "300", "--size", "16", "--runs", "2"])
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"ws QoS 0, 300 x 16 B, 2 runs: [0-9,]+, [0-9,]+ msg/s \(median [0-9,]+\);"
                        r" broker CPU [0-9.]+, [0-9.]+ us/msg \(median [0-9.]+\)", line), line

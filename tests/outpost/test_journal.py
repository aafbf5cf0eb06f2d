"""Logs under systemd go to journald with structured fields: CLIENT_ID, DEVICE, TOPIC from
`extra=`, PRIORITY from the level. Through systemd-python (its send function patched) and
through the built-in native-protocol sender (into a datagram socket the test binds)."""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from outpost import daemon


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture
def journal_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """JOURNAL_STREAM naming our stderr, as systemd sets it for a service."""
    st = os.fstat(sys.stderr.fileno())
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    monkeypatch.delenv("INVOCATION_ID", raising=False)


def parse_native(datagram: bytes) -> dict[str, str]:
    """journald's native protocol: `KEY=value\\n`, or `KEY\\n<u64 le length><data>\\n`."""
    fields: dict[str, str] = {}
    pos = 0
    while pos < len(datagram):
        newline = datagram.index(b"\n", pos)
        line = datagram[pos:newline]
        if b"=" in line:
            key, _, value = line.partition(b"=")
            fields[key.decode()] = value.decode()
            pos = newline + 1
        else:
            size = int.from_bytes(datagram[newline + 1:newline + 9], "little")
            start = newline + 9
            fields[line.decode()] = datagram[start:start + size].decode()
            assert datagram[start + size:start + size + 1] == b"\n"
            pos = start + size + 1
    return fields


def log_some(logger: logging.Logger) -> None:
    logger.info("client %s connected", "plc-7",
                extra={"client_id": "plc-7", "topic": "plant/line1/#"})
    logger.warning("device offline", extra={"device": "meter-1"})
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("poll failed\nsecond line", extra={"device": "meter-2"})


def test_fields_through_systemd_python(root_logger: logging.Logger, journal_stream: None,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    journal = pytest.importorskip("systemd.journal", reason="systemd-python is not installed")
    entries: list[dict[str, Any]] = []

    def send(message: str, **fields: Any) -> None:
        entries.append({"MESSAGE": message, **fields})

    monkeypatch.setattr(journal, "send", send)
    assert daemon.setup_logging(logging.INFO) == "journal"
    log_some(logging.getLogger("outpost.test"))
    assert len(entries) == 3
    first, second, third = entries
    assert first["MESSAGE"] == "client plc-7 connected"
    assert first["CLIENT_ID"] == "plc-7" and first["TOPIC"] == "plant/line1/#"
    assert first["PRIORITY"] == 6 and first["SYSLOG_IDENTIFIER"] == "outpost"
    assert first["LOGGER"] == "outpost.test" and "DEVICE" not in first
    assert second["DEVICE"] == "meter-1" and second["PRIORITY"] == 4
    assert third["PRIORITY"] == 3 and "ValueError: boom" in third["MESSAGE"]
    assert third["CODE_FUNC"] == "log_some"


def test_fields_through_the_builtin_sender(root_logger: logging.Logger, journal_stream: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("systemd", "systemd.daemon", "systemd.journal"):
        monkeypatch.setitem(sys.modules, name, None)  # systemd-python "not installed"
    directory = tempfile.mkdtemp(prefix="jrn")
    path = os.path.join(directory, "socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        monkeypatch.setattr(daemon, "JOURNAL_SOCKET", path)
        assert daemon.setup_logging(logging.INFO) == "journal"
        log_some(logging.getLogger("outpost.test"))
        entries = [parse_native(sock.recv(65536)) for _ in range(3)]
    os.unlink(path)
    os.rmdir(directory)
    first, second, third = entries
    assert first["MESSAGE"] == "client plc-7 connected"
    assert (first["CLIENT_ID"], first["TOPIC"], first["PRIORITY"]) == (
        "plc-7", "plant/line1/#", "6")
    assert first["SYSLOG_IDENTIFIER"] == "outpost"
    assert (second["DEVICE"], second["PRIORITY"]) == ("meter-1", "4")
    # A multi-line message (text and traceback) uses the binary-safe form, intact.
    assert third["MESSAGE"].startswith("poll failed\nsecond line\nTraceback")
    assert third["MESSAGE"].rstrip().endswith("ValueError: boom")
    assert third["DEVICE"] == "meter-2" and third["PRIORITY"] == "3"


def test_invocation_id_with_a_journal_socket_means_systemd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket_path = tmp_path / "journal"
    socket_path.touch()
    monkeypatch.setattr(daemon, "JOURNAL_SOCKET", str(socket_path))
    assert daemon.under_systemd({"INVOCATION_ID": "0123abcd"})
    assert not daemon.under_systemd({})
    socket_path.unlink()
    assert not daemon.under_systemd({"INVOCATION_ID": "0123abcd"})


def test_stderr_outside_systemd(root_logger: logging.Logger,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_STREAM", "1:1")  # not our stderr (a parent's, inherited)
    monkeypatch.delenv("INVOCATION_ID", raising=False)
    handlers = list(root_logger.handlers)
    assert daemon.setup_logging(logging.INFO) == "stderr"
    assert root_logger.handlers == handlers

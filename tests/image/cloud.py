"""The cloud's side of a remote update, on the host, for a gateway inside QEMU.

The cloud broker (the fleet's TLS mosquitto, tests/outpost/fleet_support.py) and an HTTPS
server of the bundles (a certificate from its own CA, made with openssl) listen on 127.0.0.1;
the guest reaches both at GUEST_ADDRESS through the VM's `guestfwd` rules (tests/image/vm.py),
which QEMU's user network allows even with `restrict=on`. `Reports` records what the cloud
sees on the gateways' update topics.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.https_server import serve_https

GUEST_ADDRESS = "10.0.2.100"  # where the guest finds the host's broker and HTTPS server
MQTT_PORT = 8883  # on GUEST_ADDRESS: the cloud broker, TLS
HTTPS_PORT = 443  # on GUEST_ADDRESS


@dataclass(frozen=True)
class BundleServer:
    """An HTTPS server of the files in a folder; the guest trusts `ca_file` for it."""

    port: int  # on the host's 127.0.0.1
    ca_file: Path

    def url(self, name: str) -> str:
        """The file's URL as the guest sees it."""
        return f"https://{GUEST_ADDRESS}/{name}"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def bundle_server(folder: Path, work: Path) -> Iterator[BundleServer]:
    """Serve `folder` over HTTPS with a certificate for GUEST_ADDRESS from a new CA."""
    handler = functools.partial(_Quiet, directory=str(folder))
    with serve_https(handler, work, GUEST_ADDRESS) as (port, ca_file):
        yield BundleServer(port, ca_file)


class Reports:
    """The gateways' update reports (`topic`, a filter with `+` levels) as the cloud receives
    them, in order.

    Fed by the cloud session's message callback (`add`), so it records through whatever
    connection the test has to the cloud broker (TLS with a client certificate included)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._payloads: list[bytes] = []
        self._lock = threading.Lock()

    def add(self, topic: str, payload: bytes) -> None:
        """A message the cloud session received (topics outside the filter are ignored)."""
        wanted, got = self.topic.split("/"), topic.split("/")
        if len(wanted) == len(got) and all(w in ("+", g)
                                           for w, g in zip(wanted, got, strict=True)):
            with self._lock:
                self._payloads.append(payload)

    def all(self) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(payload) for payload in self._payloads]

    def states(self, request_id: str) -> list[str]:
        """The request's states in the order reported, repeats folded."""
        seen: list[str] = []
        for report in self.all():
            request = report.get("request") or {}
            if request.get("id") == request_id and request.get("state") not in seen[-1:]:
                seen.append(request["state"])
        return seen

    def wait(self, wanted: Callable[[dict[str, Any]], bool], timeout: float,
             what: str) -> tuple[float, dict[str, Any]]:
        """The first report `wanted` accepts and when (monotonic) it was seen; waits for it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((r for r in self.all() if wanted(r)), None)
            if found is not None:
                return time.monotonic(), found
            time.sleep(0.5)
        raise TimeoutError(f"no report {what} in {timeout:.0f} s; reports: {self.all()[-5:]}")

"""`outpost update`'s own parts that run without RAUC: fetching a bundle over a real local HTTPS
server (CA file, sha256, a download that stops halfway, no space), the record of the last
install, and the after-boot self-check against a real `outpost run`.

RAUC itself (signatures, compatible, the tryboot backend, the built bundle) is tested in
tests/image/test_bundle.py, behind the `image` marker, where `make image-packages` installs it.
"""

from __future__ import annotations

import hashlib
import http.server
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from outpost import update
from outpost.config import parse_config
from tests.conftest import require
from tests.outpost.support import start_outpost
from tests.support.https_server import serve_https

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


@dataclass
class Server:
    base: str
    ca_file: Path


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/bundle.raucb":
            self._send(len(PAYLOAD), PAYLOAD)
        elif self.path == "/stops-halfway.raucb":
            self._send(len(PAYLOAD), PAYLOAD[: len(PAYLOAD) // 2])  # then the connection closes
        elif self.path == "/huge.raucb":
            self._send(1 << 50, b"")  # 1 PiB announced: no data partition holds that
        else:
            self.send_error(404)

    def _send(self, length: int, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real HTTPS server on 127.0.0.1 with a certificate from its own CA (made by openssl)."""
    require("openssl")
    with serve_https(_Handler, tmp_path_factory.mktemp("https")) as (port, ca_file):
        yield Server(f"https://127.0.0.1:{port}", ca_file)


def test_fetch_checks_the_sha256_and_reports_progress(https_server: Server, tmp_path: Path
                                                      ) -> None:
    lines: list[str] = []
    got = update.fetch(f"{https_server.base}/bundle.raucb", tmp_path, https_server.ca_file,
                       hashlib.sha256(PAYLOAD).hexdigest(), lines.append)
    assert got == tmp_path / "bundle.raucb" and got.read_bytes() == PAYLOAD
    assert lines[-1] == "download 1 MiB (100%)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.raucb"]


@pytest.mark.parametrize(("path", "sha256", "error"), [
    ("/bundle.raucb", "0" * 64, "is not the expected"),
    ("/huge.raucb", None, "not enough space"),
    ("/missing.raucb", None, "download failed: Not Found"),
])
def test_a_bad_download_is_refused_and_leaves_nothing(
        https_server: Server, tmp_path: Path, path: str, sha256: str | None, error: str) -> None:
    with pytest.raises(update.UpdateError, match=error):
        update.fetch(f"{https_server.base}{path}", tmp_path, https_server.ca_file, sha256,
                     lambda line: None)
    assert list(tmp_path.iterdir()) == []


def test_a_download_that_keeps_stopping_keeps_its_part_to_resume(https_server: Server,
                                                                 tmp_path: Path) -> None:
    """This server never sends more than half and knows no ranges: after the attempts, the
    half that arrived stays for the next command to resume from."""
    lines: list[str] = []
    with pytest.raises(update.UpdateError, match=f"stopped after {len(PAYLOAD) // 2} bytes of "
                       f"{len(PAYLOAD)} \\(2 attempts; the {len(PAYLOAD) // 2} bytes are kept"):
        update.fetch(f"{https_server.base}/stops-halfway.raucb", tmp_path,
                     https_server.ca_file, None, lines.append, attempts=2, retry_delay=0.01)
    assert any("resuming in 0.01 s (attempt 2 of 2)" in line for line in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stops-halfway.raucb.part",
                                                          "stops-halfway.raucb.part.json"]
    assert (tmp_path / "stops-halfway.raucb.part").read_bytes() == PAYLOAD[:len(PAYLOAD) // 2]


def test_a_server_the_ca_file_does_not_vouch_for_is_refused(https_server: Server,
                                                            tmp_path: Path) -> None:
    with pytest.raises(update.UpdateError, match="CERTIFICATE_VERIFY_FAILED"):
        update.fetch(f"{https_server.base}/bundle.raucb", tmp_path, None, None,
                     lambda line: None)
    with pytest.raises(update.UpdateError, match="only https://"):
        update.fetch("http://127.0.0.1:1/bundle.raucb", tmp_path, None, None, lambda line: None)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_install_is_recorded_and_touches_nothing(https_server: Server,
                                                          tmp_path: Path) -> None:
    (tmp_path / "system.conf").write_text("[system]\ncompatible=outpost-x86-64\n")
    device = update.Device(rauc="rauc-is-never-reached", system_conf=tmp_path / "system.conf",
                           download_dir=tmp_path / "download",
                           last_install=tmp_path / "last.json", download_attempts=2,
                           retry_delay=0.01)
    url = f"{https_server.base}/stops-halfway.raucb"
    with pytest.raises(update.UpdateError, match="stopped after"):
        update.install(url, device, lambda line: None, ca_file=https_server.ca_file, reboot=False)
    record = json.loads(device.last_install.read_text())
    assert record["result"] == "failed" and record["source"] == url
    assert "stopped after" in record["error"]
    assert [p.name for p in device.download_dir.iterdir() if p.suffix != ".json"] == [
        "stops-halfway.raucb.part"]  # kept to resume
    with pytest.raises(update.UpdateError, match="no such file"):
        update.install(str(tmp_path / "nothing.raucb"), device, lambda line: None, reboot=False)


def _rauc_status(booted: str, primary: str, boot_status: dict[str, str]) -> dict[str, object]:
    """`rauc status --detailed --output-format=json` of a two-slot device, as RAUC 1.8 prints it."""
    slots = []
    for index, name in enumerate("AB"):
        slots.append({f"rootfs.{index}": {
            "class": "rootfs", "bootname": name,
            "state": "booted" if name == booted else "inactive",
            "boot_status": boot_status[name],
            "slot_status": {"bundle": {"version": f"0.1.0+{name.lower()}"}}}})
    return {"compatible": "outpost-x86-64", "booted": booted, "boot_primary": primary,
            "slots": slots}


def test_status_tells_what_became_of_the_last_install() -> None:
    installed = {"result": "installed", "slot": "A", "version": "0.1.0+a", "finished": "t",
                 "source": "/var/cache/outpost-update/new.raucb"}
    pending = update.summarise(_rauc_status("B", "rootfs.0", {"A": "good", "B": "good"}),
                               installed)
    assert pending.last_install_boot == "pending" and not pending.committed
    booted = update.summarise(_rauc_status("A", "rootfs.0", {"A": "good", "B": "good"}),
                              installed)
    assert booted.last_install_boot == "booted" and booted.committed
    # Slot A failed its health check (marked bad); the boot selection went back to B.
    failed = update.summarise(_rauc_status("B", "rootfs.0", {"A": "bad", "B": "good"}),
                              installed)
    assert failed.last_install_boot == "failed" and failed.booted == "B"
    text = update.format_status(failed)
    assert "installed into A, FAILED its trial boot: back on B" in text
    assert json.loads(update.format_status(failed, as_json=True))["last_install_boot"] == "failed"
    # A refused install says nothing about slots; an old record without a slot neither.
    refused = update.summarise(_rauc_status("B", "rootfs.1", {"A": "bad", "B": "good"}),
                               {"result": "failed", "error": "refused"})
    assert refused.last_install_boot == ""
    unknown = update.summarise(_rauc_status("B", "rootfs.1", {"A": "bad", "B": "good"}),
                               {"result": "installed"})
    assert unknown.last_install_boot == ""


def test_self_check_passes_on_a_running_gateway(tmp_path: Path) -> None:
    state = tmp_path / "state"
    outpost = start_outpost(tmp_path / "gw", "", "--state-dir", str(state))
    try:
        config = parse_config({"listeners": [{"bind": f"127.0.0.1:{outpost.port}"}],
                               "uplink": {"enabled": True, "remotes": [
                                   {"addresses": ["127.0.0.1:1"]}]}})
        checks = {c.name: c for c in update.self_check(config, state)}
        assert checks["store"].ok and "schema" in checks["store"].detail
        assert checks["mqtt"].ok and "CONNACK 0" in checks["mqtt"].detail
        # An unreachable cloud broker is reported, not a failure: the outbox keeps the data.
        assert checks["uplink"].ok and "unreachable" in checks["uplink"].detail
    finally:
        outpost.stop()


def test_self_check_fails_without_a_listener_or_store(tmp_path: Path) -> None:
    outpost = start_outpost(tmp_path / "gw", "")
    port = outpost.port
    outpost.stop()  # nothing answers on that port any more
    config = parse_config({"listeners": [{"bind": f"127.0.0.1:{port}"}]})
    checks = {c.name: c for c in update.self_check(config, tmp_path / "no-state", timeout=2.0)}
    assert not checks["mqtt"].ok and not checks["store"].ok
    assert "no database" in checks["store"].detail

"""The device certificate's lifetime: its expiry shown, renewed before it runs out.

How this works: `[certificate]` names the device certificate the uplink connects with (the
one `outpost enroll` got), its key and the fleet CA. `CertificateWatch` reads the certificate
every `check_interval` seconds and publishes what it finds: a status section ("certificate":
subject, serial, not_after, seconds left, state) for the status page, `/metrics` and
`outpost status`, and, retained, `<status_topic>/certificate` through the uplink. Once fewer
than `renew_before` seconds are left (or half its lifetime, for a certificate that lives less
than twice that) it renews: a new key pair and CSR, sent over a short
connection of its own to the cloud broker (authenticated by the current certificate, on
`outpost-enroll/renew/<gateway_id>`), and the new certificate, once checked, replaces the old
one with its key (each file atomically, the key first). The uplink's connection is not
touched: it goes on with the old certificate, and every later connection uses the new one, so
nothing queued is dropped. A refusal ("revoked") or a certificate past its expiry is reported
as such (state "revoked" / "expired", with the reason) and logged as an error; renewal is
tried again at every check until it succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import Field, ValidationInfo, field_validator

from gateway.base.config_paths import existing_file
from gateway.base.hostport import parse_host_port
from gateway.base.settings import Section
from outpost.config_store import atomic_write
from outpost.enroll import exchange, tls_context
from outpost.enroll_identity import check_certificate, key_pem, make_csr

log = logging.getLogger("outpost.certificate")

STATUS_SUBTOPIC = "certificate"
RENEW_TOPIC = "outpost-enroll/renew/{gateway_id}"
REPLY_TOPIC = "outpost-enroll/reply/{gateway_id}"

Report = Callable[[str, bytes, bool], None]
# (host, port, cert, key, ca, gateway_id, csr) -> the new certificate (PEM); raises
Renew = Callable[[str, int, Path, Path, Path, str, bytes], bytes]


class CertificateConfig(Section):
    """The `[certificate]` section: the device certificate's lifetime."""

    cert_file: Path | None = Field(default=None, description="the device certificate (PEM), "
                                   "as `outpost enroll` wrote it; unset: nothing is watched")
    key_file: Path | None = Field(default=None, description="its private key")
    ca_file: Path | None = Field(default=None, description="the fleet CA")
    renew: bool = Field(default=True, description="renew before expiry")
    renew_before: Annotated[float, Field(gt=0)] = Field(
        default=30 * 24 * 3600.0, description="seconds before expiry to renew (default 30 "
        "days)")
    check_interval: Annotated[float, Field(gt=0, le=86400)] = Field(
        default=3600.0, description="seconds between looks at the certificate")
    cloud: str | None = Field(default=None, description="HOST:PORT to renew at; default the "
                              "first address of the first [[uplink.remotes]]")

    @field_validator("cert_file", "key_file", "ca_file")
    @classmethod
    def _file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else existing_file(value, info)

    @field_validator("cloud")
    @classmethod
    def _cloud(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            parse_host_port(value)
        data = info.data
        if data.get("cert_file") is not None and (data.get("key_file") is None
                                                  or data.get("ca_file") is None):
            raise ValueError("cert_file needs key_file and ca_file")
        return value


def describe(pem: bytes, now: datetime.datetime) -> dict[str, Any]:
    """What the status shows of a certificate."""
    cert = x509.load_pem_x509_certificate(pem)
    left = (cert.not_valid_after_utc - now).total_seconds()
    names = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    lifetime = (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds()
    return {"subject": str(names[0].value) if names else "",
            "serial": f"{cert.serial_number:x}",
            "not_after": f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}",
            "expires_in_s": round(left, 1), "lifetime_s": round(lifetime, 1),
            "expired": left <= 0}


class CertificateWatch:
    """Shows the device certificate's expiry and renews it in time."""

    def __init__(self, config: CertificateConfig, gateway_id: str, cloud: str | None,
                 report: Report | None, renew: Renew,
                 clock: Callable[[], datetime.datetime] | None = None) -> None:
        assert config.cert_file is not None and config.key_file is not None
        self.config = config
        self.gateway_id = gateway_id
        self.cloud = config.cloud or cloud
        self.report = report
        self.renew_call = renew
        self.clock = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self.state = "valid"
        self.error = ""
        self.renewed: str | None = None
        self.renewals = 0
        self.task: asyncio.Task[None] | None = None
        self._published: str | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._loop(), name="certificate")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def status(self) -> dict[str, Any]:
        """The "certificate" section of the gateway's status."""
        assert self.config.cert_file is not None
        try:
            facts = describe(self.config.cert_file.read_bytes(), self.clock())
        except (OSError, ValueError) as exc:
            return {"state": "unreadable", "error": f"{self.config.cert_file}: {exc}"}
        state = "expired" if facts["expired"] and self.state != "revoked" else self.state
        return {**facts, "state": state, "error": self.error, "renewed": self.renewed,
                "renewals": self.renewals, "renew_before_s": self.config.renew_before}

    async def _loop(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.config.check_interval)

    async def check(self) -> None:
        """Renew when due; publish the status when it changed."""
        status = self.status()
        left, lifetime = status.get("expires_in_s"), status.get("lifetime_s")
        # Renewed at `renew_before`, or half-way through a shorter-lived certificate (a
        # certificate that lives less than `renew_before` would be renewed at every check).
        due = isinstance(left, int | float) and isinstance(lifetime, int | float) and (
            left < min(self.config.renew_before, lifetime / 2))
        if due and self.config.renew and self.state != "revoked":
            await self._renew()
            status = self.status()
        if status["state"] == "expired" and self.state != "expired":
            log.error("certificate: %s expired at %s: the cloud refuses this gateway until "
                      "it is renewed%s", self.config.cert_file, status.get("not_after"),
                      f" ({self.error})" if self.error else "")
            self.state = "expired"
        self._publish(status)

    async def _renew(self) -> None:
        config = self.config
        assert config.cert_file is not None and config.key_file is not None
        assert config.ca_file is not None
        if self.cloud is None:
            self.error = "no cloud address to renew at ([certificate] cloud)"
            return
        host, port = parse_host_port(self.cloud)
        key = ec.generate_private_key(ec.SECP256R1())
        csr = make_csr(key, self.gateway_id)
        self.state = "renewing"
        log.info("certificate: renewing (%s left)", self.status().get("expires_in_s"))
        try:
            pem = await asyncio.to_thread(self.renew_call, host, port, config.cert_file,
                                          config.key_file, config.ca_file, self.gateway_id,
                                          csr)
            check_certificate(pem, config.ca_file.read_bytes(), self.gateway_id, key)
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
            self.state = "revoked" if "revoked" in reason else "valid"
            self.error = f"renewal failed: {reason}"
            log.error("certificate: %s", self.error)
            return
        atomic_write(config.key_file, key_pem(key), 0o600)
        atomic_write(config.cert_file, pem, 0o644)
        self.renewals += 1
        self.state, self.error = "valid", ""
        self.renewed = f"{self.clock():%Y-%m-%dT%H:%M:%SZ}"
        cert = x509.load_pem_x509_certificate(pem)
        log.info("certificate: renewed: serial %x until %s", cert.serial_number,
                 f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}")

    def _publish(self, status: dict[str, Any]) -> None:
        public = {k: status.get(k) for k in ("subject", "serial", "not_after", "state",
                                             "error", "renewed")}
        payload = json.dumps({"gateway_id": self.gateway_id, **public}, sort_keys=True)
        if payload != self._published and self.report is not None:
            self._published = payload
            self.report(STATUS_SUBTOPIC, payload.encode(), True)


def renew_over_mqtt(host: str, port: int, cert: Path, key: Path, ca: Path, gateway_id: str,
                    csr: bytes) -> bytes:
    """The renewal exchange with the enrollment service (authenticated by the current
    certificate); raises on a refusal or no answer."""
    return exchange(host, port, tls_context(ca, cert, key), f"{gateway_id}-renew",
                    RENEW_TOPIC.format(gateway_id=gateway_id),
                    REPLY_TOPIC.format(gateway_id=gateway_id),
                    {"gateway_id": gateway_id, "csr": csr.decode(), "nonce":
                     secrets.token_hex(8)}, 30.0, log.info)

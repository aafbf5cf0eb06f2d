"""Enrollment on first contact: one provisioning file for a batch of cards, and each gateway
comes up with its own certificate.

How this works (`outpost enroll`, before `outpost run`): the provisioning file names the
cloud broker, the fleet CA, the batch's enrollment credential (a batch certificate the cloud
broker lets only ask for enrollment, and a claim token the enrollment service counts) and,
optionally, the gateway id (else it is made from the machine) and a template of the gateway's
outpost.toml. The gateway makes its key pair (outpost/enroll_identity.py), connects to the
cloud broker with the batch certificate, subscribes to `outpost-enroll/reply/<gateway_id>`,
publishes its CSR with the token and a nonce on `outpost-enroll/request/<gateway_id>`, and
waits for the answer with that nonce: a certificate (checked: the fleet CA's, for this id,
for this key) or a refusal with its reason. The cloud unreachable, the connection lost, or no
answer in time: it tries again, 2, 4, 8... seconds later (at most `retry_max`), with the same
key. A refusal ends it (exit status 3): the token is expired, used up or unknown, the id is
not allowed. Once enrolled, the certificate and key are in the state directory's `identity/`,
`enrolled.json` says when, and the template, with `{gateway_id}`, `{cert_file}`, `{key_file}`
and `{ca_file}` filled in, becomes outpost.toml. Running it again on an enrolled gateway
changes nothing.
"""

from __future__ import annotations

import json
import secrets
import shutil
import ssl
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from pydantic import Field, ValidationError, ValidationInfo, field_validator

from gateway.base.config_paths import existing_file
from gateway.base.hostport import parse_host_port
from gateway.base.settings import ConfigError, Section, format_errors
from outpost.config_store import atomic_write
from outpost.enroll_identity import (
    IDENTITY_DIR,
    Identity,
    IdentityError,
    check_certificate,
    derive_gateway_id,
    make_csr,
    valid_gateway_id,
)

REQUEST_TOPIC = "outpost-enroll/request/{gateway_id}"
REPLY_TOPIC = "outpost-enroll/reply/{gateway_id}"
ENROLLED_FILE = "enrolled.json"

Say = Callable[[str], None]


class Provisioning(Section):
    """The batch's provisioning file (the same on every card of the batch)."""

    cloud: str = Field(description="HOST:PORT of the cloud broker (TLS)")
    ca_file: Path = Field(description="the fleet CA: it signs the broker's and the devices' "
                          "certificates")
    batch_cert: Path = Field(description="the batch certificate: lets a new card ask for "
                             "enrollment, nothing else")
    batch_key: Path = Field(description="its private key")
    token: str | None = Field(default=None, description="the batch's claim token")
    token_file: Path | None = Field(default=None, description="or a file holding it")
    gateway_id: str | None = Field(default=None, description="default: made from the machine")
    gateway_id_prefix: str = Field(default="outpost-", description="before the machine's "
                                   "serial number when gateway_id is not given")
    template: Path | None = Field(default=None, description="the gateway's outpost.toml, "
                                  "with {gateway_id}, {cert_file}, {key_file}, {ca_file}")
    reply_timeout: Annotated[float, Field(gt=0, le=600)] = 30.0
    retry_initial: Annotated[float, Field(gt=0, le=600)] = 2.0
    retry_max: Annotated[float, Field(gt=0, le=3600)] = 60.0

    @field_validator("cloud")
    @classmethod
    def _cloud(cls, value: str) -> str:
        parse_host_port(value)
        return value

    @field_validator("ca_file", "batch_cert", "batch_key", "token_file", "template")
    @classmethod
    def _file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else existing_file(value, info)

    @field_validator("gateway_id")
    @classmethod
    def _gateway_id(cls, value: str | None) -> str | None:
        return None if value is None else valid_gateway_id(value)

    def claim_token(self) -> str:
        """The token, from `token` or `token_file` (its first line)."""
        if self.token is not None:
            return self.token
        if self.token_file is not None:
            lines = self.token_file.read_text(encoding="utf-8").splitlines()
            return lines[0].strip() if lines else ""
        return ""


def load_provisioning(path: Path) -> Provisioning:
    """The provisioning file, or ConfigError naming every problem with its key."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read file: {exc.strerror}"]) from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    try:
        return Provisioning.model_validate(data, context={"base_dir": path.resolve().parent})
    except ValidationError as exc:
        raise ConfigError(str(path), format_errors(exc, Provisioning)) from None


class EnrollmentRefusedError(Exception):
    """The enrollment service said no; the text is its reason."""


class CloudUnavailableError(Exception):
    """No answer from the cloud this time (worth trying again)."""


@dataclass(frozen=True)
class Enrolled:
    """The outcome: who the gateway is and its certificate."""

    gateway_id: str
    certificate: Path
    key: Path
    ca: Path
    attempts: int
    seconds: float


def enroll(provisioning: Provisioning, state_dir: Path, config_out: Path | None, say: Say,
           give_up_after: float | None = None) -> Enrolled:
    """Enroll this gateway (or find it enrolled); raises EnrollmentRefusedError, or
    CloudUnavailableError after `give_up_after` seconds of trying."""
    started = time.monotonic()
    identity = Identity(state_dir / IDENTITY_DIR)
    gateway_id = provisioning.gateway_id or derive_gateway_id(provisioning.gateway_id_prefix)
    key = identity.private_key()
    ca_pem = provisioning.ca_file.read_bytes()
    if identity.certificate.exists():
        try:
            check_certificate(identity.certificate.read_bytes(), ca_pem, gateway_id, key)
        except IdentityError as exc:
            say(f"enrollment: the certificate in {identity.certificate} is unusable ({exc}); "
                "enrolling again")
        else:
            say(f"enrollment: already enrolled as {gateway_id}")
            _write_config(provisioning, identity, gateway_id, config_out, say)
            return Enrolled(gateway_id, identity.certificate, identity.key, identity.ca, 0,
                            0.0)
    csr = make_csr(key, gateway_id)
    delay = provisioning.retry_initial
    attempts = 0
    while True:
        attempts += 1
        try:
            pem = request_certificate(provisioning, gateway_id, csr, say)
            cert = check_certificate(pem, ca_pem, gateway_id, key)
            break
        except (CloudUnavailableError, IdentityError) as exc:
            waited = time.monotonic() - started
            if give_up_after is not None and waited + delay > give_up_after:
                raise CloudUnavailableError(f"not enrolled after {attempts} attempt(s) in "
                                            f"{waited:.0f} s: {exc}") from None
            say(f"enrollment: attempt {attempts} failed: {exc}; trying again in {delay:g} s")
            time.sleep(delay)
            delay = min(delay * 2, provisioning.retry_max)
    atomic_write(identity.certificate, pem, 0o644)
    atomic_write(identity.ca, ca_pem, 0o644)
    seconds = time.monotonic() - started
    say(f"enrollment: enrolled as {gateway_id} (certificate until "
        f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}, {attempts} attempt(s), "
        f"{seconds:.1f} s)")
    _write_config(provisioning, identity, gateway_id, config_out, say)
    # Last: its presence says everything above is in place (the image's enrollment unit does
    # not run again once it exists).
    atomic_write(state_dir / ENROLLED_FILE, (json.dumps({
        "gateway_id": gateway_id, "enrolled": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                            time.gmtime()),
        "serial": f"{cert.serial_number:x}",
        "not_after": f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}",
        "attempts": attempts, "seconds": round(seconds, 3)}, sort_keys=True) + "\n").encode())
    return Enrolled(gateway_id, identity.certificate, identity.key, identity.ca, attempts,
                    seconds)


def _write_config(provisioning: Provisioning, identity: Identity, gateway_id: str,
                  config_out: Path | None, say: Say) -> None:
    if provisioning.template is None or config_out is None:
        return
    text = provisioning.template.read_text(encoding="utf-8")
    for name, value in (("gateway_id", gateway_id), ("cert_file", str(identity.certificate)),
                        ("key_file", str(identity.key)), ("ca_file", str(identity.ca))):
        text = text.replace("{" + name + "}", value)
    # The file a symlink names, rewritten where it is (the image's /etc/outpost/outpost.toml
    # links into the data partition; /etc itself is read-only).
    target = config_out.resolve()
    if target.exists() and target.read_text(encoding="utf-8") == text:
        return
    if target.exists():  # never lose a configuration: the old one stays beside it
        shutil.copy2(target, target.with_name(target.name + ".before-enroll"))
    atomic_write(target, text.encode("utf-8"), 0o640)
    say(f"enrollment: wrote {config_out} for {gateway_id}")


def tls_context(ca_file: Path, cert: Path, key: Path) -> ssl.SSLContext:
    """TLS to the cloud broker: its certificate checked against the fleet CA, ours shown."""
    context = ssl.create_default_context(cafile=str(ca_file))
    context.load_cert_chain(str(cert), str(key))
    return context


def request_certificate(provisioning: Provisioning, gateway_id: str, csr: bytes, say: Say
                        ) -> bytes:
    """One exchange with the enrollment service: the certificate (PEM), or
    EnrollmentRefusedError, or CloudUnavailableError."""
    nonce = secrets.token_hex(8)
    request = {"gateway_id": gateway_id, "csr": csr.decode(), "token":
               provisioning.claim_token(), "nonce": nonce}
    host, port = parse_host_port(provisioning.cloud)
    return exchange(host, port, tls_context(provisioning.ca_file, provisioning.batch_cert,
                                            provisioning.batch_key),
                    f"outpost-enroll-{gateway_id}", REQUEST_TOPIC.format(gateway_id=gateway_id),
                    REPLY_TOPIC.format(gateway_id=gateway_id), request,
                    provisioning.reply_timeout, say)


def exchange(host: str, port: int, context: ssl.SSLContext, client_id: str,
             request_topic: str, reply_topic: str, request: dict[str, Any], timeout: float,
             say: Say) -> bytes:
    """Publish `request` and wait for the reply carrying its nonce (a certificate or a
    refusal). Shared by the enrollment and the renewal."""
    replies: list[dict[str, Any]] = []
    got = threading.Event()
    subscribed = threading.Event()

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        try:
            value = json.loads(message.payload)
        except ValueError:
            return
        if isinstance(value, dict) and value.get("nonce") == request["nonce"]:
            replies.append(value)
            got.set()

    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=mqtt.MQTTv311, clean_session=True)
    client.tls_set_context(context)
    client.on_message = on_message
    client.on_subscribe = lambda *_: subscribed.set()
    try:
        client.connect(host, port, keepalive=30)
    except (OSError, ssl.SSLError) as exc:
        raise CloudUnavailableError(f"cannot connect to {host}:{port}: {exc}") from None
    client.loop_start()
    try:
        client.subscribe(reply_topic, qos=1)
        if not subscribed.wait(timeout) or not client.is_connected():
            raise CloudUnavailableError(f"{host}:{port} did not let us subscribe to "
                                        f"{reply_topic} (refused, or the connection dropped)")
        client.publish(request_topic, json.dumps(request).encode(), qos=1)
        say(f"enrollment: request {request['nonce']} sent to {host}:{port} as "
            f"{request.get('gateway_id')}")
        if not got.wait(timeout):
            raise CloudUnavailableError(f"no answer within {timeout:g} s")
    finally:
        client.disconnect()
        client.loop_stop()
    reply = replies[0]
    if reply.get("error"):
        raise EnrollmentRefusedError(str(reply["error"]))
    certificate = reply.get("certificate")
    if not isinstance(certificate, str):
        raise CloudUnavailableError("the answer holds no certificate")
    return certificate.encode()

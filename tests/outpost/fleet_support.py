"""The cloud of a fleet, for tests: a real mosquitto with TLS that requires client
certificates and takes their common name as the user name (`require_certificate true`,
`use_identity_as_username true`), an ACL in the shape docs/operations.md gives, the fleet's PKI
(made with openssl by `make_pki`), and the enrollment service running in a thread."""

from __future__ import annotations

import contextlib
import datetime
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cloud_spark.fleet.broker import BrokerOptions
from cloud_spark.fleet.enroll_service import serve
from cloud_spark.fleet.enrollment import CertificateAuthority, Registry
from tests.gateway.broker.auth.support import PKI, make_pki
from tests.support.mosquitto import Mosquitto, free_port

ACL = """\
user enroll-service
topic read outpost-enroll/request/+
topic read outpost-enroll/renew/+
topic write outpost-enroll/reply/+

user deploy
topic readwrite #

user batch-1
topic write outpost-enroll/request/+
topic read outpost-enroll/reply/+

pattern write outpost-enroll/renew/%u
pattern read outpost-enroll/reply/%u
pattern readwrite outpost-status/%u
pattern readwrite outpost-status/%u/#
pattern write outpost-diagnostics/%u
pattern read outpost-cmd/%u/#
pattern write fleet/%u/#
"""


@dataclass
class FleetCloud:
    """The cloud broker, its PKI, the registry and the running enrollment service."""

    broker: Mosquitto
    pki: PKI
    registry: Registry
    ca: CertificateAuthority
    stop_service: threading.Event | None = None
    thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    def options(self, user: str) -> BrokerOptions:
        cert, key = self.pki.clients[user]
        return BrokerOptions("127.0.0.1", self.broker.port, f"test-{user}-{id(self)}",
                             self.pki.ca, cert, key)

    def start_service(self) -> None:
        self.stop_service = threading.Event()
        self.thread = threading.Thread(target=serve, args=(
            self.options("enroll-service"), self.registry, self.ca, self.stop_service),
            daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.stop_service is not None and self.thread is not None:
            self.stop_service.set()
            self.thread.join(10)
            self.stop_service = self.thread = None

    def add_token(self, token: str, uses: int, allow: list[str] | None = None,
                  days: float = 1.0) -> None:
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=days)
        self.registry.add_token(token, uses, expires, allow or [])


def mosquitto_tls(workdir: Path, pki: PKI, port: int | None = None) -> Mosquitto:
    """A mosquitto (not started) with the fleet's TLS listener and ACL."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "acl").write_text(ACL)
    return Mosquitto(workdir=workdir, port=port or free_port(), extra_config=(
        f"cafile {pki.ca}", f"certfile {pki.server_cert}", f"keyfile {pki.server_key}",
        "require_certificate true", "use_identity_as_username true",
        f"acl_file {workdir / 'acl'}"))


@contextlib.contextmanager
def fleet_cloud(workdir: Path, lifetime: float = 24 * 3600.0, service: bool = True,
                server_ips: tuple[str, ...] = ()) -> Iterator[FleetCloud]:
    """The whole cloud side, stopped at the end (`server_ips`: more addresses the broker's
    certificate is for)."""
    pki = make_pki(workdir / "pki", clients=("batch-1", "enroll-service", "deploy"),
                   server_ips=server_ips)
    broker = mosquitto_tls(workdir / "broker", pki)
    broker.start()
    cloud = FleetCloud(broker, pki, Registry(workdir / "registry.json"),
                       CertificateAuthority(pki.ca, pki.dir / "ca.key", lifetime))
    try:
        if service:
            cloud.start_service()
        yield cloud
    finally:
        cloud.stop()
        broker.stop()


def provisioning(cloud: FleetCloud, folder: Path, token: str, gateway_id: str | None = None,
                 template: str | None = None, extra: str = "") -> Path:
    """A batch's provisioning file (and its template) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = cloud.pki.clients["batch-1"]
    lines = [f'cloud = "{cloud.address}"', f'ca_file = "{cloud.pki.ca}"',
             f'batch_cert = "{cert}"', f'batch_key = "{key}"', f'token = "{token}"',
             "reply_timeout = 5", "retry_initial = 0.2", "retry_max = 1"]
    if gateway_id is not None:
        lines.append(f'gateway_id = "{gateway_id}"')
    if template is not None:
        (folder / "outpost.toml.in").write_text(template)
        lines.append('template = "outpost.toml.in"')
    path = folder / "provision.toml"
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def gateway_template(cloud: FleetCloud, extra: str = "") -> str:
    """The configuration a provisioned gateway runs: the uplink to the cloud with its own
    certificate (the placeholders are filled in by `outpost enroll`)."""
    return f"""gateway_id = "{{gateway_id}}"

[uplink]
enabled = true

[[uplink.remotes]]
name = "cloud"
addresses = ["{cloud.address}"]
client_id = "{{gateway_id}}"
backoff_initial = 0.2
backoff_max = 2.0
tls = {{ ca_file = "{{ca_file}}", cert_file = "{{cert_file}}", key_file = "{{key_file}}" }}

[[uplink.inbound]]
filter = "outpost-cmd/{{gateway_id}}/#"

[[uplink.forward]]
filter = "fleet/#"
remote = "cloud"
topic = {{ strip = "fleet/", prefix = "fleet/{{gateway_id}}/" }}

[certificate]
cert_file = "{{cert_file}}"
key_file = "{{key_file}}"
ca_file = "{{ca_file}}"
{extra}"""

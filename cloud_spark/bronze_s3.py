"""Bronze straight to S3 or an S3-compatible store: one PUT per committed file.

How this works: :class:`S3Sink` is the lander's :class:`~cloud_spark.bronze_writer.BronzeSink`
for a ``--root s3://bucket/prefix``. A committed file becomes one object at
``<prefix>/bronze/ingest_date=…/ingest_hour=…/part-….json.gz``, the key layout of a local
root; a PUT is atomic (the object appears whole or not at all), so there is no temp object
and nothing to clean up after a crash. :meth:`S3Sink.store` returns only once S3 answered the
PUT with success, and the lander acknowledges a file's messages only after that.

* **Client**: boto3 (one thread-safe client; uploads run on the lander's worker threads, so
  several are in flight at once). Endpoint, region and credentials follow the AWS
  conventions: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``,
  ``AWS_PROFILE`` and the shared ``~/.aws/config`` and ``~/.aws/credentials`` files, SSO,
  web identity, the instance's role; ``AWS_REGION``/``AWS_DEFAULT_REGION``. An S3-compatible
  store is named by ``--s3-endpoint`` or ``AWS_ENDPOINT_URL_S3`` (or ``AWS_ENDPOINT_URL``)
  and then addressed path-style (``http://host:port/bucket/key``), signing for ``us-east-1``
  unless a region is set. docs/cloud.md says why boto3 and not obstore.
* **At start**, :meth:`S3Sink.check` sends a HEAD for the bucket and turns a failure into
  one line naming what is wrong (:class:`S3SetupError`): the bucket does not exist, the
  credentials are refused or missing, the endpoint does not answer. The lander then exits
  non-zero before it subscribes.
* **At runtime** every failed PUT (the store is down, throttling, an expired credential, …)
  is retried with exponential backoff from 0.5 s to :data:`RETRY_MAX_S`, forever, with a
  warning per attempt; meanwhile the file's messages, and those of every file after it,
  stay unacknowledged, and the lander stops reading at ``--max-held``: the broker keeps the
  rest. :meth:`S3Sink.give_up_after` (the lander calls it when it is told to stop) bounds
  the retrying, after which :meth:`store` raises :class:`S3StoreError` (an ``OSError``):
  the lander exits non-zero without acknowledging what was not stored, and the broker
  delivers those messages again to the next run.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger("cloud_spark.bronze_s3")

#: the URI schemes of an S3 landing root (``s3a`` is accepted as Spark users write it)
S3_SCHEMES = ("s3", "s3a")

#: the longest wait between two attempts of a failed PUT
RETRY_MAX_S = 5.0

#: the region that signs requests to an S3-compatible endpoint when none is configured
DEFAULT_REGION = "us-east-1"

_NOT_FOUND = {"404", "NoSuchBucket", "NotFound"}
_DENIED = {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden",
           "ExpiredToken", "InvalidToken", "AccessDeniedException"}  # fmt: skip


class S3SetupError(RuntimeError):
    """The landing bucket cannot be used (checked at start); the message says why."""


class S3StoreError(OSError):
    """A PUT that was given up on (the lander was stopping); its messages stay unacked."""


@dataclass(frozen=True)
class S3Root:
    """An ``s3://bucket/prefix`` landing root."""

    bucket: str
    prefix: str  # no leading or trailing "/"; may be empty

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def uri(self, rel: str = "") -> str:
        key = self.key(rel) if rel else self.prefix
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"


def is_s3_root(text: str) -> bool:
    """True for an ``s3://`` (or ``s3a://``) landing root."""
    return urlparse(text).scheme in S3_SCHEMES


def parse_s3_root(text: str) -> S3Root:
    """``s3://bucket/prefix`` → :class:`S3Root`; ValueError naming what is wrong."""
    parsed = urlparse(text)
    if parsed.scheme not in S3_SCHEMES:
        raise ValueError(f"not an s3:// URI: {text!r}")
    bucket = parsed.netloc
    if not bucket:
        raise ValueError(f"no bucket in {text!r} (expected s3://BUCKET/PREFIX)")
    if parsed.query or parsed.fragment:
        raise ValueError(f"unexpected ?query or #fragment in {text!r}")
    return S3Root(bucket, parsed.path.strip("/"))


def endpoint_from_env(env: dict[str, str] | None = None) -> str | None:
    """The S3 endpoint the AWS conventions name (``AWS_ENDPOINT_URL_S3``, then
    ``AWS_ENDPOINT_URL``), or None for AWS's own."""
    env = dict(os.environ) if env is None else env
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def error_code(exc: BaseException) -> str:
    """The S3 error code (or HTTP status) of a botocore ClientError, else ''."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


class S3Sink:
    """Committed bronze files as S3 objects (see the module docstring)."""

    def __init__(
        self,
        root: S3Root,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        max_pool_connections: int = 32,
    ) -> None:
        import boto3  # noqa: PLC0415 (the `cloud` extra; loaded only for an s3:// root)
        from botocore.config import Config  # noqa: PLC0415

        self.root = root
        self.endpoint = endpoint or endpoint_from_env()
        session = boto3.session.Session()
        self.region = region or session.region_name or (DEFAULT_REGION if self.endpoint else None)
        addressing = {"addressing_style": "path"} if self.endpoint else {}

        def client(attempts: int, read_timeout: float) -> Any:
            return session.client(
                "s3", endpoint_url=self.endpoint, region_name=self.region,
                config=Config(
                    s3=addressing, max_pool_connections=max_pool_connections,
                    connect_timeout=5, read_timeout=read_timeout,
                    retries={"max_attempts": attempts, "mode": "standard"},
                ),
            )  # fmt: skip

        # Uploads: botocore's retries first (throttling, a reset connection), then ours.
        self._client = client(attempts=3, read_timeout=60)
        # The start check answers at once or says what is wrong.
        self._check_client = client(attempts=1, read_timeout=10)
        self._give_up_at: float | None = None
        self._stopping = threading.Event()

    def where(self) -> str:
        """The endpoint for messages: the configured URL or AWS's own."""
        return self.endpoint or f"AWS S3 ({self.region or 'default region'})"

    def describe_error(self, exc: BaseException) -> str:
        """One line naming what is wrong for a botocore error."""
        from botocore.exceptions import (  # noqa: PLC0415
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            ReadTimeoutError,
        )

        bucket = self.root.bucket
        code = error_code(exc)
        if isinstance(exc, NoCredentialsError):
            return ("no AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                    "or AWS_PROFILE, or ~/.aws/credentials)")  # fmt: skip
        if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
            return f"the S3 endpoint {self.where()} does not answer ({exc})"
        if isinstance(exc, ReadTimeoutError):
            return f"the S3 endpoint {self.where()} accepted the connection but did not answer"
        if code in _NOT_FOUND:
            return f"bucket {bucket!r} does not exist at {self.where()}"
        if code in _DENIED:
            return (f"access to bucket {bucket!r} at {self.where()} is denied: wrong or missing "
                    f"credentials, or no permission ({code})")  # fmt: skip
        return f"S3 request to {self.where()} failed: {exc}"

    def check(self) -> None:
        """HEAD the bucket; :class:`S3SetupError` naming what is wrong if it cannot be used."""
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

        try:
            self._check_client.head_bucket(Bucket=self.root.bucket)
        except (BotoCoreError, ClientError) as exc:
            raise S3SetupError(f"cannot land to {self.root.uri()}: "
                               f"{self.describe_error(exc)}") from None  # fmt: skip

    # BronzeSink

    def begin(self, rel: str) -> None:
        """Nothing to do: an object appears whole when its PUT succeeds."""

    def store(self, rel: str, data: bytes) -> str:
        """PUT ``data`` at ``rel``, retrying until it is stored (or given up: S3StoreError)."""
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

        key = self.root.key(rel)
        uri = self.root.uri(rel)
        delay = 0.5
        attempt = 0
        while True:
            attempt += 1
            try:
                self._client.put_object(Bucket=self.root.bucket, Key=key, Body=data)
                if attempt > 1:
                    log.warning("stored %s at attempt %d", uri, attempt)
                return uri
            except (BotoCoreError, ClientError) as exc:
                reason = self.describe_error(exc)
            give_up_at = self._give_up_at
            now = time.monotonic()
            if give_up_at is not None and now >= give_up_at:
                raise S3StoreError(f"gave up storing {uri} after {attempt} attempts: {reason}")
            log.warning("cannot store %s (attempt %d): %s; retrying in %.1f s (its messages "
                        "stay unacknowledged)", uri, attempt, reason, delay)  # fmt: skip
            if give_up_at is None:
                self._stopping.wait(delay)  # woken early when the lander starts stopping
            else:
                time.sleep(min(delay, max(0.0, give_up_at - now)))
            delay = min(delay * 2, RETRY_MAX_S)

    def give_up_after(self, seconds: float) -> None:
        """Retry failed PUTs at most ``seconds`` more (the lander is stopping)."""
        self._give_up_at = time.monotonic() + seconds
        self._stopping.set()

    def remove_stale(self, lander: str) -> int:
        """Nothing is ever half-written to S3 (a PUT is atomic)."""
        return 0

    def location(self, rel: str) -> str:
        return self.root.uri(rel)

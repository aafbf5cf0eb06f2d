"""Command line: ``python -m cloud_spark land …`` and ``python -m cloud_spark <job> …``.

How this works: a thin layer. :func:`build_parser` declares every command and flag (the docs
test checks that each appears in ``docs/cloud.md``); :func:`main` turns flags into the
parameter dataclass of the chosen command and calls the library function. ``land`` never
imports PySpark; the jobs never import the lander. Job results are printed as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

from cloud_spark import contract as c
from cloud_spark.batch_format import MAX_BODY
from cloud_spark.jobs import JOBS

log = logging.getLogger("cloud_spark")


def _broker(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _range(text: str) -> tuple[str, float | None, float | None]:
    """``POINT=MIN:MAX`` with either bound optional, e.g. ``temperature=-40:85``, ``rpm=:3000``."""
    point, sep, bounds = text.partition("=")
    low, colon, high = bounds.partition(":")
    if not sep or not colon or not point:
        raise argparse.ArgumentTypeError(f"expected POINT=MIN:MAX, got {text!r}")
    try:
        return point, float(low) if low else None, float(high) if high else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad bounds in {text!r}") from None


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _landing_root(text: str) -> Path | str:
    """A local directory as a Path; an s3:// URI checked and kept as text."""
    from cloud_spark.bronze_s3 import is_s3_root, parse_s3_root

    if is_s3_root(text):
        try:
            parse_s3_root(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    if "://" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the lander lands to a directory or to s3://BUCKET/PREFIX")
    return Path(text)


def _add_land(sub: Any) -> None:
    p = sub.add_parser(
        "land",
        help="subscribe to the cloud broker and write bronze files",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--broker", type=_broker, required=True, metavar="HOST:PORT")
    p.add_argument("--topic", action="append", required=True, metavar="FILTER", help="repeatable")
    p.add_argument("--share", metavar="GROUP", help="subscribe as $share/GROUP/FILTER")
    p.add_argument(
        "--root", type=_landing_root, required=True,
        help="landing root, a directory or s3://BUCKET/PREFIX; bronze/ goes under it",
    )  # fmt: skip
    _add_s3_flags(p, "an s3:// root", "AWS_REGION or the AWS config, else us-east-1 with an "
                  "endpoint")
    p.add_argument(
        "--client-id",
        default=f"outpost-lander-{socket.gethostname()}",
        help="MQTT client id; keep it stable, it names the persistent session",
    )
    p.add_argument(
        "--roll-bytes", type=_positive_int, default=8 * 1024 * 1024,
        help="commit a file at this many uncompressed bytes",
    )  # fmt: skip
    p.add_argument(
        "--roll-seconds", type=float, default=5.0,
        help="commit a file this long after its first message (the ack latency)",
    )  # fmt: skip
    p.add_argument(
        "--receive-maximum", type=_positive_int, default=1000,
        help="MQTT 5 Receive Maximum: unacked messages in flight; a file is committed "
        "when it holds this many",
    )  # fmt: skip
    p.add_argument(
        "--max-batch-bytes", type=_positive_int, default=MAX_BODY,
        help="a batched message whose body declares or inflates to more is quarantined",
    )  # fmt: skip
    p.add_argument(
        "--max-held", type=_positive_int, metavar="N",
        help="stop reading the socket while this many messages are received and not yet "
        "acknowledged (default: four times --receive-maximum)",
    )  # fmt: skip
    p.add_argument(
        "--max-held-bytes", type=_positive_int, default=64 * 1024 * 1024, metavar="BYTES",
        help="... or while their bronze records take this many bytes (a batched message "
        "carries many rows)",
    )  # fmt: skip
    p.add_argument(
        "--leave", action="store_true",
        help="leave the share group for good: land what the session holds, unsubscribe, "
        "end the session, exit",
    )  # fmt: skip
    p.add_argument("--session-expiry", type=int, default=7 * 24 * 3600, help="seconds")
    p.add_argument("--keepalive", type=int, default=30, help="seconds")
    p.add_argument("--username")
    p.add_argument("--password", help="better: the OUTPOST_LANDER_PASSWORD variable")
    p.add_argument("--tls-ca", type=Path, metavar="PEM", help="CA bundle; enables TLS")
    p.add_argument("--tls-cert", type=Path, metavar="PEM", help="client certificate")
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="client key")
    p.add_argument("--tls-insecure", action="store_true", help="skip certificate checks")


def _add_job(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help_text, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--root", help="landing root holding bronze/ (read by silver)")
    p.add_argument("--out", required=True, help="tables root (silver/, gold/ under it)")
    p.add_argument("--master", help="Spark master (default: local[*] unless spark-submit)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting")
    _add_s3_flags(p, "s3:// and s3a:// paths", "AWS_REGION, else us-east-1 with --s3-endpoint")
    return p


def _add_s3_flags(p: argparse.ArgumentParser, paths: str, region_default: str) -> None:
    """--s3-endpoint and --s3-region, for the S3 `paths` a command takes."""
    p.add_argument(
        "--s3-endpoint", metavar="URL",
        help=f"S3-compatible store for {paths}, addressed path-style "
        "(default: AWS_ENDPOINT_URL_S3, else AWS's own)",
    )  # fmt: skip
    p.add_argument("--s3-region", metavar="REGION",
                   help=f"region that signs S3 requests (default: {region_default})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cloud_spark",
        description="outpost cloud side: the lander and the Spark batch jobs (docs/cloud.md)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_land(sub)
    silver = _add_job(sub, "silver", "bronze -> deduplicated typed tables + quarantine")
    silver.add_argument("--prefix", default=c.DEFAULT_DEVICE_PREFIX, help="device topic prefix")
    silver.add_argument(
        "--uplink-topic", default=c.UPLINK_DIAGNOSTICS_TOPIC, help="uplink diagnostics topic"
    )
    silver.add_argument(
        "--late-after-s", type=float, default=300.0, help="landed this much after ts = late"
    )
    silver.add_argument(
        "--relist-days", type=int, default=1,
        help="an incremental run lists bronze ingest dates from this many days before the "
        "latest one it processed",
    )  # fmt: skip
    silver.add_argument(
        "--full", action="store_true", help="reprocess all of bronze, replace every table"
    )
    rollups = _add_job(sub, "rollups", "1m/15m/1h/1d aggregates with time-weighted average")
    rollups.add_argument("--grains", type=_csv, default=("1m", "15m", "1h", "1d"), help="CSV")
    rollups.add_argument(
        "--max-hold-s", type=float, default=900.0, help="a value holds at most this long"
    )
    rollups.add_argument(
        "--qualities", type=_csv, default=("good", "uncertain"), help="CSV of qualities used"
    )
    rollups.add_argument(
        "--full", action="store_true", help="recompute every day, not only the touched ones"
    )
    _add_job(sub, "alarms", "gold/alarms: each occurrence of an alarm with its raised, "
             "acknowledged and cleared times (from silver/alarm_events)")
    availability = _add_job(sub, "availability", "device, gateway and link outages, uptime")
    availability.add_argument(
        "--expected-interval-s", type=float, default=60.0, help="heartbeat of the devices"
    )
    availability.add_argument(
        "--gap-factor", type=float, default=2.0, help="silence > interval x factor = outage"
    )
    availability.add_argument(
        "--link-delay-s", type=float, default=120.0, help="landed this much late = link down"
    )
    availability.add_argument(
        "--link-min-messages", type=_positive_int, default=10, help="in a row, to count"
    )
    availability.add_argument(
        "--shutdown-window-s", type=float, default=5.0,
        help="device offline this soon before its gateway's offline = the bridge stopping",
    )  # fmt: skip
    availability.add_argument(
        "--full", action="store_true", help="recompute every day, not only the touched ones"
    )
    quality = _add_job(sub, "quality", "missing seq, out-of-range, stuck values, clock skew")
    quality.add_argument(
        "--range", type=_range, action="append", default=[], dest="ranges",
        metavar="POINT=MIN:MAX", help="repeatable; a bound may be empty",
    )  # fmt: skip
    quality.add_argument(
        "--stuck-after-s", type=float, default=3600.0, help="same value this long = stuck"
    )
    quality.add_argument(
        "--stuck-min-samples", type=_positive_int, default=5, help="and at least this many"
    )
    quality.add_argument(
        "--skew-threshold-s", type=float, default=60.0, help="|received - ts| above = skewed"
    )
    quality.add_argument(
        "--full", action="store_true", help="recompute everything, not only the touched days"
    )
    health = _add_job(sub, "health", "device and uplink health from diagnostics")
    health.add_argument("--window-s", type=float, default=3600.0, help="summary window")
    health.add_argument(
        "--full", action="store_true", help="recompute every day, not only the touched ones"
    )
    fleet = _add_job(sub, "fleet", "gold/fleet: per gateway its status, versions, "
                     "configuration, certificate, backlog, last seen")
    fleet.add_argument("--status-prefix", default="outpost-status",
                       help="the gateways' status topic prefix")
    fleet.add_argument("--full", action="store_true", help="read all of silver again")
    report = _add_job(sub, "report", "print a summary and write it as JSON")
    report.add_argument("--json", dest="json_path", help="JSON path (default: OUT/report.json)")
    maintain = _add_job(sub, "maintain", "OPTIMIZE and VACUUM every Delta table under --out")
    maintain.add_argument(
        "--vacuum-hours", type=float, default=168.0,
        help="VACUUM keeps files that a table version younger than this references",
    )  # fmt: skip
    maintain.add_argument("--no-vacuum", action="store_true", help="OPTIMIZE only")
    maintain.add_argument(
        "--table", action="append", default=[], metavar="NAME",
        help="only this table (repeatable; e.g. points, _manifest/processed_files)",
    )  # fmt: skip
    everything = _add_job(sub, "all", "run every job in order (silver ... report), defaults")
    everything.add_argument("--prefix", default=c.DEFAULT_DEVICE_PREFIX, help="as for silver")
    everything.add_argument(
        "--uplink-topic", default=c.UPLINK_DIAGNOSTICS_TOPIC, help="as for silver"
    )
    everything.add_argument("--full", action="store_true", help="as for silver")
    return parser


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def job_params(name: str, args: argparse.Namespace) -> Any:
    """The parameter dataclass of job ``name`` from parsed flags (defaults if absent)."""
    # The job modules import PySpark: only a command that runs a job pays for it.
    from cloud_spark.jobs.availability import AvailabilityParams
    from cloud_spark.jobs.fleet import DEFAULT_STATUS_PREFIX, FleetParams
    from cloud_spark.jobs.health import HealthParams
    from cloud_spark.jobs.quality import QualityParams
    from cloud_spark.jobs.report import ReportParams
    from cloud_spark.jobs.rollups import RollupParams
    from cloud_spark.jobs.silver import SilverParams

    def get(key: str, default: Any) -> Any:
        return getattr(args, key, default)

    if name == "silver":
        return SilverParams(
            prefix=get("prefix", c.DEFAULT_DEVICE_PREFIX),
            uplink_topic=get("uplink_topic", c.UPLINK_DIAGNOSTICS_TOPIC),
            late_after_ms=_ms(get("late_after_s", 300.0)),
            relist_days=get("relist_days", 1),
            full=get("full", False),
        )
    if name == "rollups":
        return RollupParams(
            grains=tuple(get("grains", RollupParams.grains)),
            max_hold_ms=_ms(get("max_hold_s", 900.0)),
            qualities=tuple(get("qualities", RollupParams.qualities)),
            full=get("full", False),
        )
    if name == "availability":
        return AvailabilityParams(
            expected_interval_ms=_ms(get("expected_interval_s", 60.0)),
            gap_factor=get("gap_factor", 2.0),
            link_delay_ms=_ms(get("link_delay_s", 120.0)),
            link_min_messages=get("link_min_messages", 10),
            shutdown_window_ms=_ms(get("shutdown_window_s", 5.0)),
            full=get("full", False),
        )
    if name == "quality":
        return QualityParams(
            ranges=tuple(get("ranges", ())),
            stuck_after_ms=_ms(get("stuck_after_s", 3600.0)),
            stuck_min_samples=get("stuck_min_samples", 5),
            skew_threshold_ms=_ms(get("skew_threshold_s", 60.0)),
            full=get("full", False),
        )
    if name == "health":
        return HealthParams(window_ms=_ms(get("window_s", 3600.0)), full=get("full", False))
    if name == "fleet":
        return FleetParams(status_prefix=get("status_prefix", DEFAULT_STATUS_PREFIX),
                           full=get("full", False))
    if name == "alarms":
        from cloud_spark.jobs.alarms import AlarmsParams

        return AlarmsParams()
    if name == "report":
        return ReportParams(json_path=get("json_path", None))
    if name == "maintain":
        from cloud_spark.jobs.maintain import MaintainParams

        return MaintainParams(
            vacuum_hours=get("vacuum_hours", 168.0),
            vacuum=not get("no_vacuum", False),
            only=tuple(get("table", ())),
        )
    raise ValueError(f"unknown job {name!r}")


def run_job(name: str, spark: Any, root: str | None, out: str, params: Any) -> Any:
    """Run one job in an existing session (used by the CLI, tests and the benchmark)."""
    if name == "silver" and not root:
        raise SystemExit("silver needs --root (the landing root that holds bronze/)")
    module = import_module(f"cloud_spark.jobs.{name}")
    return module.run(spark, root or "", out, params)


def _run_jobs(args: argparse.Namespace) -> int:
    # PySpark (the `cloud` extra) is imported by the commands that start Spark only.
    from pyspark.sql import SparkSession

    from cloud_spark import object_store_conf as s3
    from cloud_spark.jobs.manifest import ConcurrentRunError
    from cloud_spark.spark import SparkPackagesError, SparkVersionError, get_spark

    names = list(JOBS) if args.command == "all" else [args.command]
    conf = dict(item.split("=", 1) for item in args.conf)
    try:
        conf.update(s3.s3a_session_conf((args.root, args.out), conf, args.s3_endpoint,
                                        args.s3_region))  # fmt: skip
    except s3.ObjectStoreConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    existing = SparkSession.getActiveSession()
    try:
        spark = get_spark(f"outpost-{args.command}", args.master, conf)
    except (SparkVersionError, SparkPackagesError) as exc:
        raise SystemExit(f"error: {exc}") from None
    try:
        s3.apply_to_session(spark, conf)
        served = s3.s3_scheme_served(spark)  # EMR, Databricks: keep their s3://
        root, out = (s3.hadoop_uri(p, served) if p else p for p in (args.root, args.out))
        s3.check_store(spark, (root, out))  # a bad store fails here, in seconds
        for name in names:
            result = run_job(name, spark, root, out, job_params(name, args))
            if name != "report":
                print(json.dumps({"job": name, **result}, default=str), flush=True)
    except ConcurrentRunError as exc:  # another silver run claimed the same files first
        raise SystemExit(f"error: {exc}") from None
    except Exception as exc:  # an S3 fault is one line, not a Java stack trace
        endpoint = args.s3_endpoint or s3.endpoint_from_env()
        message = s3.describe_store_error(exc, (args.root, args.out), endpoint)
        if message is None:
            raise
        raise SystemExit(f"error: {message}") from None
    finally:
        if existing is None:  # leave a session we did not start (tests, notebooks) running
            spark.stop()
    return 0


def _land(args: argparse.Namespace) -> int:
    # The lander is imported by the `land` command only; the jobs never load it.
    from cloud_spark.lander import LanderConfig, run_lander

    host, port = args.broker
    cfg = LanderConfig(
        host=host,
        port=port,
        topics=tuple(args.topic),
        root=args.root,
        client_id=args.client_id,
        share=args.share,
        roll_bytes=args.roll_bytes,
        roll_seconds=args.roll_seconds,
        receive_maximum=args.receive_maximum,
        max_batch_body=args.max_batch_bytes,
        max_held=args.max_held,
        max_held_bytes=args.max_held_bytes,
        leave=args.leave,
        session_expiry_s=args.session_expiry,
        keepalive_s=args.keepalive,
        username=args.username,
        password=args.password or os.environ.get("OUTPOST_LANDER_PASSWORD"),
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_insecure=args.tls_insecure,
        s3_endpoint=args.s3_endpoint,
        s3_region=args.s3_region,
    )
    from cloud_spark.bronze_s3 import S3SetupError

    try:
        return asyncio.run(run_lander(cfg))
    except (S3SetupError, OSError) as exc:  # the bucket, credentials, endpoint; a failed commit
        raise SystemExit(f"error: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command == "land":
        return _land(args)
    return _run_jobs(args)

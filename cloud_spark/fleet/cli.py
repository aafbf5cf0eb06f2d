"""Command line of the fleet: `python -m cloud_spark.fleet keygen|config send|...`.

A thin layer: each subcommand turns its flags into a call of the library function that does
the work (signing.py, config_send.py, enrollment), and prints one line per gateway.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cloud_spark.fleet.broker import BrokerOptions, CloudSession
from cloud_spark.fleet.config_send import (
    DEFAULT_COMMAND_TOPIC,
    DEFAULT_STATUS_PREFIX,
    find_gateways,
    part_problem,
    send_config,
)
from cloud_spark.fleet.enroll_service import load, serve
from cloud_spark.fleet.enrollment import Registry
from cloud_spark.fleet.signing import PARTS, WHOLE, generate_key


def _broker(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def add_broker_options(p: argparse.ArgumentParser) -> None:
    """--broker and how to log in to the cloud broker."""
    p.add_argument("--broker", type=_broker, required=True, metavar="HOST:PORT")
    p.add_argument("--tls-ca", type=Path, metavar="PEM", help="CA bundle; enables TLS")
    p.add_argument("--tls-cert", type=Path, metavar="PEM", help="client certificate")
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="client key")
    p.add_argument("--username")
    p.add_argument("--password-env", default="OUTPOST_FLEET_PASSWORD", metavar="VAR",
                   help="environment variable holding the password")


def broker_options(args: argparse.Namespace, role: str) -> BrokerOptions:
    """The session options from the flags of `add_broker_options`."""
    host, port = args.broker
    return BrokerOptions(host, port, f"outpost-fleet-{role}-{socket.gethostname()}-"
                         f"{os.getpid()}", args.tls_ca, args.tls_cert, args.tls_key,
                         args.username, os.environ.get(args.password_env))


def build_parser() -> argparse.ArgumentParser:
    """Every fleet subcommand."""
    parser = argparse.ArgumentParser(prog="python -m cloud_spark.fleet",
                                     description="outpost fleet: signed configurations, "
                                     "enrollment (docs/operations.md)")
    parser.add_argument("--log-level", default="WARNING")
    sub = parser.add_subparsers(dest="command", required=True)
    keygen = sub.add_parser("keygen", help="a new ed25519 key to sign configurations with")
    keygen.add_argument("--out", type=Path, required=True, help="folder: KEY_ID.key, KEY_ID.pem")
    keygen.add_argument("--key-id", required=True, help="its name, e.g. fleet-2026")
    config = sub.add_parser("config", help="configurations sent to gateways")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    send = config_sub.add_parser("send", help="sign and send a configuration, show the results")
    add_broker_options(send)
    send.add_argument("--gateway", required=True, metavar="PATTERN",
                      help="a gateway id, or a pattern (plant-*) over the gateways that "
                      "have a status topic")
    send.add_argument("--config", type=Path, required=True,
                      help="the outpost.toml to send, or the fragment of --part; "
                      "{gateway_id} becomes each gateway's id")
    send.add_argument("--part", choices=PARTS, default=WHOLE,
                      help="all: the whole file (default); devices: the bridge's buses and "
                      "devices ([[bridge.buses]], [[bridge.devices]], [[bridge.serial]], "
                      "[[bridge.opcua]]); forward: the [[uplink.forward]] rules. A part "
                      "replaces all of those arrays in the running file")
    send.add_argument("--remove-all", action="store_true",
                      help="send an empty part: remove every device (or forward rule)")
    send.add_argument("--signing-key", type=Path, required=True,
                      help="KEY_ID.key (its public KEY_ID.pem in the gateways' keyring)")
    send.add_argument("--version", type=int, help="the configuration's version (default: "
                      "the time in milliseconds: above every earlier default)")
    send.add_argument("--id", help="a request id the reports carry (default: cfg-VERSION)")
    send.add_argument("--wait", type=float, default=300.0, help="seconds to wait for results")
    send.add_argument("--status-prefix", default=DEFAULT_STATUS_PREFIX)
    send.add_argument("--command-topic", default=DEFAULT_COMMAND_TOPIC)
    token = sub.add_parser("token", help="claim tokens for a batch of new gateways")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    add = token_sub.add_parser("add", help="a new claim token (printed)")
    add.add_argument("--registry", type=Path, required=True, help="the enrollment registry "
                     "(JSON: tokens, enrolled devices)")
    add.add_argument("--token", help="the token (default: 32 random hex digits)")
    add.add_argument("--uses", type=int, required=True, help="how many gateways it may enroll")
    add.add_argument("--valid-days", type=float, default=30.0, help="until it expires")
    add.add_argument("--allow", action="append", default=[], metavar="PATTERN",
                     help="gateway ids it may enroll (fnmatch, repeatable; default all)")
    enroll = sub.add_parser("enroll", help="the enrollment service")
    enroll_sub = enroll.add_subparsers(dest="enroll_command", required=True)
    serve = enroll_sub.add_parser("serve", help="answer enrollment and renewal requests")
    add_broker_options(serve)
    serve.add_argument("--registry", type=Path, required=True)
    serve.add_argument("--ca-cert", type=Path, required=True, help="the fleet CA (PEM)")
    serve.add_argument("--ca-key", type=Path, required=True, help="its private key (PEM)")
    serve.add_argument("--cert-lifetime", type=float, default=365 * 24 * 3600.0,
                       metavar="SECONDS", help="how long a device certificate is valid")
    revoke = enroll_sub.add_parser("revoke", help="refuse a gateway's renewals from now on")
    revoke.add_argument("--registry", type=Path, required=True)
    revoke.add_argument("gateway_id")
    return parser


def cmd_token_add(args: argparse.Namespace) -> int:
    token = args.token or secrets.token_hex(16)
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=args.valid_days)
    Registry(args.registry).add_token(token, args.uses, expires, args.allow)
    print(f"token {token}: {args.uses} gateway(s) until {expires:%Y-%m-%dT%H:%M:%SZ}, "
          f"allowed: {', '.join(args.allow) or '*'}")
    return 0


def cmd_enroll_serve(args: argparse.Namespace) -> int:
    registry, ca = load(args.registry, args.ca_cert, args.ca_key, args.cert_lifetime)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    serve(broker_options(args, "enroll"), registry, ca, stop)
    return 0


def cmd_enroll_revoke(args: argparse.Namespace) -> int:
    if not Registry(args.registry).revoke(args.gateway_id):
        print(f"{args.gateway_id} is not enrolled", file=sys.stderr)
        return 1
    print(f"{args.gateway_id} revoked: its renewals are refused")
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    private, public = generate_key(args.out, args.key_id)
    print(f"signing key {private} (keep it in the cloud); public key {public} (into each "
          "gateway's keyring folder)")
    return 0


def cmd_config_send(args: argparse.Namespace) -> int:
    template = args.config.read_text(encoding="utf-8")
    problem = part_problem(template, args.part, args.remove_all)
    if problem:
        print(f"{args.config}: {problem}", file=sys.stderr)
        return 2
    version = args.version or int(time.time() * 1000)
    request_id = args.id or f"cfg-{version}"
    with CloudSession(broker_options(args, "config")) as session:
        gateways = find_gateways(session, args.gateway, args.status_prefix)
        if not gateways:
            print(f"no gateway matches {args.gateway!r}", file=sys.stderr)
            return 1
        what = "" if args.part == WHOLE else f"part {args.part}, "
        print(f"sending {what}version {version} ({request_id}) to {len(gateways)} gateway(s)",
              flush=True)
        results = send_config(session, gateways, template, args.signing_key, version,
                              request_id, args.wait, args.status_prefix, args.command_topic,
                              args.part)
    for result in results:
        print(result.line())
    return 0 if all(r.state == "applied" for r in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=str(args.log_level).upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers: dict[Any, Any] = {
        ("keygen", None): cmd_keygen,
        ("config", "send"): cmd_config_send,
        ("token", "add"): cmd_token_add,
        ("enroll", "serve"): cmd_enroll_serve,
        ("enroll", "revoke"): cmd_enroll_revoke,
    }
    return int(handlers[(args.command, getattr(args, f"{args.command}_command", None))](args))

"""The `outpost` command: thin subcommands over library functions.

Each subcommand imports the modules only it needs when it runs (the server, the store, the
status client, the demo): `outpost status` or `outpost passwd` on a Pi does not pay the
start-up of the whole appliance (0.6 s more, measured on a busy amd64 test machine). These are
imports of modules below this one, never a way around an import cycle (the layer contracts in
pyproject.toml forbid cycles).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import tomllib
from pathlib import Path

from pydantic import ValidationError

from bridge import cli as bridge_cli
from bridge import device_commands
from gateway.base.hostport import parse_host_port
from gateway.base.settings import ConfigError
from gateway.broker.contracts.config import ListenerConfig
from outpost import __version__, update, update_runner
from outpost.config import Config, config_folder, load_config, secret_warnings
from outpost.update_command import Spool

DEFAULT_STATE_DIR = Path("/var/lib/outpost")
DEFAULT_CONFIG = Path("/etc/outpost/outpost.toml")


def _host_port(value: str) -> str:
    try:
        parse_host_port(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="outpost", description="outpost edge gateway")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument("--version", action="version", version=f"outpost {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the gateway")
    run.add_argument("--config", type=Path, help="TOML configuration file")
    run.add_argument(
        "--listen", action="append", type=_host_port, metavar="HOST:PORT",
        help="listen here instead of the configured listeners (repeatable)",
    )
    run.add_argument("--state-dir", type=Path, help="directory for persistent state")
    run.add_argument(
        "--durability", choices=("full", "normal", "memory"),
        help="override [storage] durability: full (fsync per commit), normal, memory",
    )

    check = sub.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file", type=Path)

    passwd = sub.add_parser(
        "passwd", help="add, change or delete a user in a password file (PBKDF2-SHA512, "
        "readable by mosquitto too)")
    passwd.add_argument("file", type=Path, help="password file (created with mode 0600)")
    passwd.add_argument("username")
    passwd.add_argument("-D", "--delete", action="store_true", help="delete the user")
    passwd.add_argument("--stdin", action="store_true",
                        help="read the password from the first line of stdin (scripts)")
    passwd.add_argument("--iterations", type=int, default=None,
                        help="PBKDF2 iterations (default 210000)")

    demo = sub.add_parser("demo", help="the whole pipeline on this machine, then the report")
    demo.add_argument("--duration", type=float, default=150.0,
                      help="seconds of device data (default 150)")
    demo.add_argument("--quick", action="store_true", help="a shortened run (--duration 30)")
    demo.add_argument("--work-dir", type=Path, default=Path("demo-data"),
                      help="where configs, state, logs, bronze and tables go (default ./demo-data)")

    status = sub.add_parser("status", help="summary of a running gateway (its status endpoint)")
    status.add_argument("--url", help="status endpoint, e.g. http://127.0.0.1:8080 (default: "
                        "[status] bind of --config, else of /etc/outpost/outpost.toml)")
    status.add_argument("--config", type=Path, help="TOML configuration file")
    status.add_argument("--json", action="store_true", help="print the raw /status JSON")
    status.add_argument("--user", help="user name for an endpoint with a password file (the "
                        "password from $OUTPOST_STATUS_PASSWORD, else asked)")
    status.add_argument("--ca-file", type=Path, help="CA certificate(s) to check an https --url "
                        "with (default: the system's; through --config: the configured "
                        "tls_cert itself)")

    # outpost modbus plan|probe, opcua browse|probe, s7 probe, bacnet discover|probe,
    # enip probe|browse
    bridge_cli.add_parser(sub)
    _add_update_parser(sub)
    _add_config_parser(sub)
    enroll = sub.add_parser("enroll", help="first contact: make this gateway's key pair, get "
                            "its certificate from the fleet's enrollment service, write its "
                            "configuration")
    enroll.add_argument("--provisioning", type=Path, required=True,
                        help="the batch's provisioning file")
    enroll.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help=f"where the identity is kept (default {DEFAULT_STATE_DIR})")
    enroll.add_argument("--config", type=Path, help="write the provisioning template here "
                        "once enrolled (e.g. /etc/outpost/outpost.toml)")
    enroll.add_argument("--give-up-after", type=float, metavar="SECONDS",
                        help="stop trying after this long (default: keep trying)")

    from outpost import history_command  # (small: the history reader and its answer)

    history_command.add_parser(sub, DEFAULT_CONFIG)

    db = sub.add_parser("db", help="inspect, back up or compact the store "
                        "(all but vacuum safe on a live broker)")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    for name, text in (
        ("stats", "sizes, rows per table, queue depths, oldest message ages, WAL size"),
        ("sessions", "stored sessions, subscriptions and queue depths"),
        ("queue", "the stored deliveries of one client, oldest first"),
        ("retained", "retained messages, optionally matching a topic filter"),
        ("check", "PRAGMA quick_check (--full: integrity_check); exit 1 on problems"),
        ("vacuum", "compact the file (only while the broker is stopped)"),
        ("backup", "copy the database to DEST while the broker runs (online backup API), "
                   "then check the copy"),
    ):
        cmd = db_sub.add_parser(name, help=text)
        cmd.add_argument("--state-dir", type=Path, help="default: [storage] state_dir of the "
                         "configuration, else /var/lib/outpost")
        cmd.add_argument("--config", type=Path,
                         help=f"TOML configuration file (default: {DEFAULT_CONFIG} if present)")
        if name == "queue":
            cmd.add_argument("client_id")
            cmd.add_argument("--limit", type=int, default=100)
        elif name == "retained":
            cmd.add_argument("filter", nargs="?")
        elif name == "check":
            cmd.add_argument("--full", action="store_true")
        elif name == "backup":
            cmd.add_argument("dest", type=Path, help="the file to write, e.g. /backup/outpost.db")
            cmd.add_argument("--force", action="store_true", help="overwrite an existing DEST")
            cmd.add_argument("--pages-per-step", type=int, default=256,
                             help="pages copied per step (default 256)")
            cmd.add_argument("--sleep-ms", type=float, default=5.0,
                             help="pause between steps, in ms (default 5)")
    return parser


def _add_update_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    update = sub.add_parser("update", help="A/B updates of the root slots through RAUC "
                            "(install a signed bundle, status, health check)")
    update_sub = update.add_subparsers(dest="update_command", required=True)
    install = update_sub.add_parser("install", help="install a bundle (a file or an https "
                                    "URL) into the inactive slot, then reboot into it")
    install.add_argument("source", help="bundle file or https:// URL")
    install.add_argument("--ca-file", type=Path, help="CA certificates for the https server")
    install.add_argument("--sha256", help="the bundle's expected sha256 (hex)")
    install.add_argument("--no-reboot", action="store_true",
                         help="install, but leave the reboot into the new slot for later")
    install.add_argument("--allow-downgrade", action="store_true",
                         help="install a bundle older than the running version")
    request = update_sub.add_parser(
        "run-request", help="install the request the gateway spooled from a remote update "
        "command (outpost-update.service runs this as root), report into the spool")
    request.add_argument("--config", type=Path, help="for [remote_update] ca_file (default: "
                         f"{DEFAULT_CONFIG} if present)")
    request.add_argument("--state-dir", type=Path, help="the spool: default [storage] "
                         f"state_dir, else {DEFAULT_STATE_DIR}")
    request.add_argument("--download-dir", type=Path,
                         help="where the bundle is downloaded (default /var/cache/outpost-update)")
    request.add_argument("--no-reboot", action="store_true",
                         help="install, but leave the reboot into the new slot for later")
    status = update_sub.add_parser("status", help="booted slot, versions, last install, "
                                   "whether the running slot is committed")
    status.add_argument("--json", action="store_true", help="print JSON")
    health = update_sub.add_parser("health-check", help="self-check after boot, then mark the "
                                   "booted slot good, or bad and reboot (outpost-health.service)")
    health.add_argument("--config", type=Path, help=f"default: {DEFAULT_CONFIG} if present")
    health.add_argument("--state-dir", type=Path, help="default: [storage] state_dir")
    health.add_argument("--deadline", type=float, default=120.0,
                        help="seconds the check may take to pass (default 120)")
    health.add_argument("--no-reboot", action="store_true",
                        help="mark the slot bad on failure, but do not reboot")


def _add_config_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser("config", help="the versions of outpost.toml kept in the state "
                            "directory: history, show one, roll back")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    for name, text in (("history", "every kept version: number, time, source, result"),
                       ("show", "the text of one version"),
                       ("rollback", "write an earlier version again (default: the previous "
                        "applied one); then reload: systemctl reload outpost")):
        cmd = config_sub.add_parser(name, help=text)
        cmd.add_argument("--config", type=Path, help=f"default: {DEFAULT_CONFIG}")
        cmd.add_argument("--state-dir", type=Path, help="default: [storage] state_dir of the "
                         f"configuration, else {DEFAULT_STATE_DIR}")
        if name == "history":
            cmd.add_argument("--json", action="store_true", help="print JSON")
        elif name == "show":
            cmd.add_argument("version", type=int)
        else:
            cmd.add_argument("version", type=int, nargs="?", help="the version to restore")


def cmd_config(args: argparse.Namespace) -> int:
    """`outpost config history|show|rollback`: thin calls into outpost.config_store."""
    import json

    from outpost.config_store import ConfigStore, ConfigStoreError

    path = args.config or DEFAULT_CONFIG
    state_dir = args.state_dir
    if state_dir is None:
        try:
            state_dir = load_config(path).storage.state_dir or DEFAULT_STATE_DIR
        except ConfigError:
            state_dir = DEFAULT_STATE_DIR  # the history is all the more wanted then
    store = ConfigStore(path, state_dir)
    try:
        if args.config_command == "history":
            versions = store.history()
            if args.json:
                print(json.dumps([v.as_dict() for v in versions], indent=2))
                return 0
            running = store.current().version
            for v in versions:
                mark = "*" if v.number == running else " "
                reason = f"  {v.reason}" if v.reason else ""
                print(f"{mark}{v.number:>5}  {v.time}  {v.sha256[:12]}  {v.source:<20} "
                      f"{v.result}{reason}")
            return 0
        if args.config_command == "show":
            sys.stdout.write(store.show(args.version))
            return 0
        restored = store.rollback(to=args.version, reason="rolled back by hand")
        print(f"{path}: version {restored.number} written ({restored.source}); apply it "
              "with: systemctl reload outpost")
        return 0
    except ConfigStoreError as exc:
        print(f"outpost config: {exc}", file=sys.stderr)
        return 1


def cmd_enroll(args: argparse.Namespace) -> int:
    """`outpost enroll`: a thin call into outpost.enroll (exit 3: refused, 1: not reached)."""
    from outpost.enroll import (
        CloudUnavailableError,
        EnrollmentRefusedError,
        enroll,
        load_provisioning,
    )
    from outpost.enroll_identity import IdentityError

    try:
        provisioning = load_provisioning(args.provisioning)
    except ConfigError as exc:
        _print_config_errors(exc)
        return 2
    try:
        enroll(provisioning, args.state_dir, args.config, lambda line: print(line, flush=True),
               args.give_up_after)
    except EnrollmentRefusedError as exc:
        print(f"outpost enroll: refused by the enrollment service: {exc}", file=sys.stderr)
        return 3
    except (CloudUnavailableError, IdentityError) as exc:
        print(f"outpost enroll: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    """`outpost update install|run-request|status|health-check`: outpost.update
    and update_runner do the work."""
    device = update.Device()

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        if args.update_command == "install":
            info = update.install(args.source, device, say, ca_file=args.ca_file,
                                  sha256=args.sha256, reboot=not args.no_reboot,
                                  allow_downgrade=args.allow_downgrade)
            say(f"installed {info.version}")
            return 0
        if args.update_command == "status":
            print(update.format_status(update.read_status(device), as_json=args.json))
            return 0
        if args.update_command == "run-request":
            return _run_request(args, say)
        config = load_config(config_path(args.config))
        state_dir = args.state_dir or config.storage.state_dir or DEFAULT_STATE_DIR
        good = update.health_check(config, args.state_dir, device, args.deadline, say,
                                   reboot=not args.no_reboot)
        if config.remote_update.enabled:  # the gateway reports the running slot to the cloud
            update_runner.record_running(Spool(state_dir), device, say)
        return 0 if good else 1
    except update.UpdateError as exc:
        print(f"outpost update: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        _print_config_errors(exc)
        return 2


def _run_request(args: argparse.Namespace, say: update.Progress) -> int:
    """`outpost update run-request`: a request is always settled (installed or failed, and
    removed), even when the configuration cannot be read: the path unit would start the
    runner again for as long as the request file is there."""
    device = update.Device()
    if args.download_dir is not None:
        device = update.Device(download_dir=args.download_dir)
    try:
        config = load_config(config_path(args.config))
    except ConfigError as exc:
        _print_config_errors(exc)
        spool = Spool(args.state_dir or DEFAULT_STATE_DIR)
        update_runner.fail_request(spool, f"{exc.source}: invalid configuration: "
                                   + "; ".join(exc.errors), say)
        return 2
    state_dir = args.state_dir or config.storage.state_dir or DEFAULT_STATE_DIR
    return update_runner.run_request(Spool(state_dir), device, config.remote_update.ca_file,
                                     not args.no_reboot, say)


def _with_listeners(config: Config, listen: list[str] | None) -> Config:
    if not listen:
        return config
    listeners = [ListenerConfig(bind=address) for address in listen]
    return config.model_copy(update={"listeners": listeners})


def cmd_run(args: argparse.Namespace) -> int:
    """`outpost run`."""
    from outpost.app import run

    try:
        config = _with_listeners(load_config(args.config), args.listen)
    except ConfigError as exc:
        _print_config_errors(exc)
        return 2
    if args.durability is not None:
        storage = config.storage.model_copy(update={"durability": args.durability})
        config = config.model_copy(update={"storage": storage})
    if args.state_dir is not None:
        args.state_dir.mkdir(parents=True, exist_ok=True)

    def reload_config() -> Config:
        """SIGHUP: the file again, with the same command-line overrides."""
        fresh = _with_listeners(load_config(args.config), args.listen)
        if args.durability is not None:
            storage = fresh.storage.model_copy(update={"durability": args.durability})
            fresh = fresh.model_copy(update={"storage": storage})
        return fresh

    return run(config, args.state_dir, reload_config if args.config is not None else None,
               config_path=args.config)


def config_path(given: Path | None) -> Path | None:
    """The file a command reads: `--config`, else the device's own file when it exists
    (None: the embedded defaults)."""
    if given is not None:
        return given
    return DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None


def cmd_db(args: argparse.Namespace) -> int:
    """`outpost db stats|sessions|queue|retained|check|vacuum|backup`: thin calls into storage."""
    from storage.sqlite.cli import run as run_db_command

    state_dir = _given_state_dir(args)
    if state_dir is None:
        return 2
    return run_db_command(args.db_command, state_dir, args)


def cmd_history(args: argparse.Namespace) -> int:
    """`outpost history POINT...`: read the history file of the state directory."""
    from outpost import history_command

    state_dir = _given_state_dir(args)
    if state_dir is None:
        return 2
    return history_command.run(args, state_dir)


def _given_state_dir(args: argparse.Namespace) -> Path | None:
    """`--state-dir`, else the configuration's state directory (the default one when it
    names none); None when the configuration is invalid (its errors are printed)."""
    if args.state_dir is not None:
        return Path(args.state_dir)
    try:
        config = load_config(config_path(args.config))
    except ConfigError as exc:
        _print_config_errors(exc)
        return None
    return Path(config.storage.state_dir or DEFAULT_STATE_DIR)


def cmd_status(args: argparse.Namespace) -> int:
    """`outpost status`: fetch /status from the running gateway and print a summary."""
    import json
    import ssl

    from outpost.status import render_text
    from outpost.status_client import (
        CredentialsNeededError,
        StatusUnavailableError,
        fetch_status,
        pinned_context,
    )

    url = args.url
    context = None if args.ca_file is None else ssl.create_default_context(
        cafile=str(args.ca_file))
    if url is None:
        path = config_path(args.config)
        try:
            status_config = load_config(path).status
        except ConfigError as exc:
            _print_config_errors(exc)
            return 2
        where = f"[status] of {path}" if path is not None else "the default [status]"
        if not status_config.enabled:
            print(f"outpost status: the status endpoint is disabled ({where} has enabled = "
                  f"false), so there is nothing to ask; set enabled = true and reload, or use "
                  f"journalctl -u outpost", file=sys.stderr)
            return 1
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(status_config.host,
                                                        status_config.host)
        scheme = "http" if status_config.tls_cert is None else "https"
        url = f"{scheme}://{f'[{host}]' if ':' in host else host}:{status_config.port}"
        if status_config.tls_cert is not None and context is None:
            context = pinned_context(status_config.tls_cert)
        source = f" (bind {status_config.bind} from {where})"
    else:
        source = ""
    credentials = None
    if args.user is not None:
        password = os.environ.get("OUTPOST_STATUS_PASSWORD")
        if password is None:
            import getpass

            password = getpass.getpass(f"password of {args.user}: ")
        credentials = (args.user, password)
    try:
        status = fetch_status(url, context=context, credentials=credentials)
    except CredentialsNeededError as exc:
        print(f"outpost status: {exc}{source}", file=sys.stderr)
        print("  give one of the users of [status] password_file: outpost status --user NAME "
              "(password from $OUTPOST_STATUS_PASSWORD, else asked)", file=sys.stderr)
        return 1
    except StatusUnavailableError as exc:
        print(f"outpost status: {exc}{source}", file=sys.stderr)
        print("  is outpost running (systemctl status outpost) with [status] enabled?",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_text(status))
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    """`outpost check-config FILE`: exit 0 when valid, else print every error and exit 2.

    Every error: the file's own (TOML, keys and values), then every problem with the password
    files, ACL files and certificates of each listener whose section is valid on its own, even
    when other parts of the file are not. Warnings (exit status unchanged): secrets that others
    can read (`secret_warnings`).
    """
    from gateway.broker.net.security_files import listener_file_errors

    listeners: list[tuple[int, ListenerConfig]]
    warnings: list[str] = []
    try:
        config = load_config(args.file)
    except ConfigError as exc:
        errors = list(exc.errors)
        listeners = _valid_listeners(args.file)
    else:
        errors = []
        listeners = list(enumerate(config.listeners))
        warnings = secret_warnings(config, args.file)
    errors += listener_file_errors(listeners)
    for warning in warnings:
        print(f"{args.file}: warning: {warning}", file=sys.stderr)
    if errors:
        _print_config_errors(ConfigError(str(args.file), errors))
        return 2
    print(f"{args.file}: OK")
    return 0


def _valid_listeners(path: Path) -> list[tuple[int, ListenerConfig]]:
    """(index, listener) for each `[[listeners]]` entry of `path` that validates on its own."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    entries = data.get("listeners")
    if not isinstance(entries, list):
        return []
    valid: list[tuple[int, ListenerConfig]] = []
    for index, entry in enumerate(entries):
        try:
            listener = ListenerConfig.model_validate(
                entry, context={"base_dir": config_folder(path)})
        except ValidationError:
            continue
        valid.append((index, listener))
    return valid


def cmd_passwd(args: argparse.Namespace) -> int:
    """`outpost passwd FILE USER [-D] [--stdin]`: a thin call into `set_password`."""
    import getpass

    from gateway.broker.contracts.passwords import DEFAULT_ITERATIONS
    from gateway.broker.net.security_files import set_password

    password: bytes | None = None
    if not args.delete:
        if args.stdin:
            password = sys.stdin.readline().rstrip("\r\n").encode("utf-8")
        else:
            first = getpass.getpass("Password: ")
            if getpass.getpass("Reenter password: ") != first:
                print("outpost passwd: the passwords do not match", file=sys.stderr)
                return 1
            password = first.encode("utf-8")
        if not password:
            print("outpost passwd: empty password refused", file=sys.stderr)
            return 1
    try:
        print(set_password(args.file, args.username, password,
                           args.iterations or DEFAULT_ITERATIONS))
    except (ValueError, OSError) as exc:
        print(f"outpost passwd: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """`outpost demo`: a thin call into `outpost.demo.run_demo`."""
    from outpost.demo import run_demo

    if importlib.util.find_spec("pymodbus") is None:  # the simulated meter needs it
        print("outpost demo needs pymodbus for its simulated meter: "
              "pip install 'outpost[demo]' (make demo installs it)", file=sys.stderr)
        return 2
    return run_demo(args.work_dir, 30.0 if args.quick else args.duration)


def _print_config_errors(exc: ConfigError) -> None:
    print(f"{exc.source}: invalid configuration", file=sys.stderr)
    for line in exc.errors:
        print(f"  {line}", file=sys.stderr)


def cmd_modbus(args: argparse.Namespace) -> int:
    """`outpost modbus plan|probe`: the bridge's tools, given this appliance's config loader."""
    return bridge_cli.run(args, lambda path: load_config(path).bridge)


def cmd_opcua(args: argparse.Namespace) -> int:
    """`outpost opcua browse|probe`: the bridge's OPC UA tools."""
    return device_commands.run_opcua(args, lambda path: load_config(path).bridge)


def cmd_s7(args: argparse.Namespace) -> int:
    """`outpost s7 probe`: the bridge's S7 tool."""
    return device_commands.run_s7(args, lambda path: load_config(path).bridge)


def cmd_bacnet(args: argparse.Namespace) -> int:
    """`outpost bacnet discover|probe`: the bridge's BACnet tools."""
    return device_commands.run_bacnet(args, lambda path: load_config(path).bridge)


def cmd_enip(args: argparse.Namespace) -> int:
    """`outpost enip probe|browse`: the bridge's EtherNet/IP tools."""
    return device_commands.run_enip(args, lambda path: load_config(path).bridge)


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handlers = {
        "run": cmd_run, "check-config": cmd_check_config, "demo": cmd_demo, "db": cmd_db,
        "passwd": cmd_passwd,
        "history": cmd_history,
        "status": cmd_status,
        "modbus": cmd_modbus,
        "opcua": cmd_opcua,
        "s7": cmd_s7,
        "bacnet": cmd_bacnet,
        "enip": cmd_enip,
        "update": cmd_update,
        "config": cmd_config,
        "enroll": cmd_enroll,
    }
    return handlers[args.command](args)

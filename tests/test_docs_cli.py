"""Every command line in the fenced blocks of README.md, docs/*.md and the benchmark READMEs
(bench/README.md, bench/cloud/README.md) is run here, or is run by
a named test, or is listed as not runnable here with the reason: the table `COMMANDS` holds
each one, so a new example fails `test_every_documented_command_is_classified` until it is
added to the table (and a line that left the docs fails until it leaves the table).

A command line is a line of a ```sh / ```shell / ```bash / unlabelled block (in a ```console
block, only the lines after `$ `) that starts with `outpost `, `python -m `, `.venv/bin/`,
`mosquitto_pub`, `mosquitto_sub`, `systemctl` or `journalctl`, or pipes into `outpost `.
The key is the line as written without `$ `, a leading `sudo ` (we are root here, and the
machine has no sudo) and a trailing `# comment`.

How the runnable ones run: through `bash -c`, as written, with an `outpost` (and `python`) on
PATH that is this checkout. Only the placeholders the docs use are replaced: /etc/outpost/ by
a copy of docs/examples/ with an outpost.toml (without the passwd file: the first
`outpost passwd` line of the table creates it and the later ones change it, in table order),
/var/lib/outpost and /var/backups/outpost by temporary directories, and FILE, USER, DIR,
HOST:PORT, CLIENT, FILTER and DEST of a synopsis by real values. A line that relies on a
default location (`outpost status` reads /etc/outpost/outpost.toml, `outpost db` uses
/var/lib/outpost) gets that location as an option. Commands that need a gateway run against a
real `outpost run` on 127.0.0.1 with a retained message and a stored offline session; prompts
are answered on a real pty.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from gateway.broker.contracts.passwords import parse_password_text, verify
from tests.support.broker_proc import launch
from tests.support.mosquitto import free_port

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "bench" / "README.md", ROOT / "bench" / "cloud" / "README.md"]

FENCE = re.compile(r"^[ \t]*```([a-z]*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
COMMAND_BLOCKS = {"", "sh", "shell", "bash", "console"}
STARTS = ("outpost ", "python -m ", ".venv/bin/", "mosquitto_pub", "mosquitto_sub",
          "systemctl ", "journalctl ")
COMMENT = re.compile(r"\s+#(\s.*)?$")


def commands_in(name: str, text: str) -> Iterator[tuple[str, str]]:
    """(command line, file:line) of each command line in the fenced blocks of `text`."""
    for block in FENCE.finditer(text):
        if block.group(1) not in COMMAND_BLOCKS:
            continue
        first = text.count("\n", 0, block.start()) + 2
        lines = block.group(2).splitlines()
        i = 0
        while i < len(lines):
            start = i
            line = lines[i].strip()
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + lines[i].strip()
            i += 1
            if block.group(1) == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            line = COMMENT.sub("", line).removeprefix("sudo ").strip()
            if line.startswith(STARTS) or "| outpost " in line:
                yield line, f"{name}:{first + start}"


def documented_commands() -> dict[str, list[str]]:
    """Each command line of the documents in `FILES` -> where it is (file:line)."""
    found: dict[str, list[str]] = {}
    for path in FILES:
        name = path.relative_to(ROOT).as_posix()
        for line, where in commands_in(name, path.read_text(encoding="utf-8")):
            found.setdefault(line, []).append(where)
    return found


# -- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """Run here: exit code `exit`, and `shows` (a regex) is in stdout + stderr.

    `line` replaces the documented line when that one is a synopsis (`[--opt X]`, `a|b`);
    `gateway`: needs the running gateway; `prompts`: typed at the terminal, one per prompt;
    `server`: the line runs until stopped: it must print its listening line, show `shows`,
    then exit 0 on SIGTERM; `user`: (name, present) for an `outpost passwd` line, the state of
    the password file it starts from (the lines may run in any order, on any worker).
    """

    shows: str
    exit: int = 0
    line: str | None = None
    gateway: bool = False
    prompts: tuple[str, ...] = ()
    server: bool = False
    user: tuple[str, bool] | None = None


@dataclass(frozen=True)
class RunElsewhere:
    """Run as written by another test (a path under tests/ with its test name)."""

    test: str


@dataclass(frozen=True)
class Synopsis:
    """A usage line: the command's --help must know each `--option` it names."""


@dataclass(frozen=True)
class NotRunnable:
    """Cannot run on this machine or in a test; `reason` says why."""

    reason: str


Entry = Run | RunElsewhere | Synopsis | NotRunnable

NO_SYSTEMD = ("needs systemd as PID 1 and the installed unit; this machine is a container "
              "without it (tests/image/test_nspawn.py runs the unit under systemd-nspawn where "
              "that is available)")
BENCH = ("a benchmark: minutes of load that yield figures, not a verdict; benchmarks run on "
         "purpose outside the test suite")
GETTING_STARTED = "tests/bridge/test_getting_started.py::test_getting_started_page_end_to_end"
STATE = "--state-dir DIR"

COMMANDS: dict[str, tuple[Entry, ...]] = {
    # README.md: the command synopsis
    "outpost run [--config FILE] [--listen HOST:PORT]... [--state-dir DIR] "
    "[--durability full|normal|memory]": (
        Synopsis(),
        Run(r"outpost: listening on 127\.0\.0\.1:\d+", server=True,
            line="outpost run --config FILE --listen HOST:PORT --state-dir DIR "
                 "--durability normal"),
    ),
    "outpost check-config FILE": (
        Run(r": OK", line="outpost check-config FILE"),
        Run(r"limits\.queue_overflow: Input should be", exit=2,
            line="outpost check-config BAD-FILE"),
    ),
    "outpost status": (
        Run(r"(?m)^outpost \S+ \(outpost [0-9.]+\)\n  uptime ", gateway=True),
    ),
    "outpost passwd FILE USER": (
        Run(r"added user 'bob'", prompts=("bob-secret", "bob-secret"), user=("bob", False)),
    ),
    "outpost db stats|sessions|queue CLIENT|retained [FILTER]|check|vacuum|backup DEST": (
        Run(r"file_bytes\s+\d+", gateway=True, line=f"outpost db stats {STATE}"),
        Run(r"sleeper", gateway=True, line=f"outpost db sessions {STATE}"),
        Run(r"docs/queued", gateway=True, line=f"outpost db queue {STATE} CLIENT"),
        Run(r"docs/retained", gateway=True, line=f"outpost db retained {STATE} FILTER"),
        Run(r"^ok\n$", gateway=True, line=f"outpost db check {STATE}"),
        Run(r"is locked: .*stop the broker first", exit=1, gateway=True,
            line=f"outpost db vacuum {STATE}"),  # refused while it runs, as documented
        Run(r"quick_check\s+ok", gateway=True, line=f"outpost db backup {STATE} DEST"),
    ),
    "outpost modbus plan CONFIG | outpost modbus probe ...": (Synopsis(),),
    # docs/bridge.md
    "outpost modbus plan /etc/outpost/outpost.toml": (
        RunElsewhere("tests/test_docs.py::test_bridge_plan_sample_is_the_plan_of_the_example"),
        RunElsewhere(GETTING_STARTED),
    ),
    **{line: (RunElsewhere("tests/test_docs.py::test_probe_example_runs_against_a_simulator"),)
       for line in (
        "outpost modbus probe --tcp 192.168.1.10:502 --unit-id 1 --table holding --address 4 "
        "--address-base 1 --count 2",
        "outpost modbus probe --serial /dev/ttyUSB0 --baudrate 9600 --parity E --unit-id 3 "
        "--table input --address 0x48 --address-base 0 --count 2",
        "outpost modbus probe --rtu-over-tcp 10.0.0.7:4001 --unit-id 2 --address 100 "
        "--address-base 0 --count 4",
        "outpost modbus probe --serial /dev/ttyUSB0 --unit-id 1 --map profile:eastron-sdm630",
        "outpost modbus probe --tcp 192.168.1.10:502 --unit-id 1 --map maps/plc.toml "
        "--address-base 0",
    )},
    **{line: (RunElsewhere("tests/bridge/opcua/test_node_server.py::"
                           "test_browse_and_probe_commands"),)
       for line in (
        "outpost opcua browse opc.tcp://192.168.0.10:4840",
        "outpost opcua browse opc.tcp://192.168.0.10:4840 /3:DataBlocksGlobal --depth 2",
        "outpost opcua probe opc.tcp://192.168.0.10:4840 --save-certificate "
        "/etc/outpost/opcua/press-1.der",
        "outpost opcua probe --config /etc/outpost/outpost.toml --device press-1",
    )},
    ".venv/bin/python -m bench.bridge.opcua": (NotRunnable(BENCH),),
    **{line: (RunElsewhere("tests/bridge/s7/test_node_server.py::"
                           "test_probe_prints_the_plan_and_every_point"),)
       for line in (
        "outpost s7 probe --config /etc/outpost/outpost.toml --device press-2",
        "outpost s7 probe 192.168.0.20 --slot 1 --point DB10.DBD4:REAL --point DB10.DBX2.3 "
        "--point IW64:INT",
    )},
    **{line: (RunElsewhere("tests/bridge/bacnet/test_node_device.py::test_probe_command"),)
       for line in (
        "outpost bacnet discover --broadcast 192.168.0.255:47808",
        "outpost bacnet probe 192.168.0.41 --device-id 12012 --network 2001 --mac 0c "
        "--object AI:1 --object MSV:1",
        "outpost bacnet probe --config /etc/outpost/outpost.toml --device ahu-1",
    )},
    **{line: (RunElsewhere("tests/bridge/enip/test_simulator.py::"
                           "test_probe_prints_the_plan_and_every_point"),)
       for line in (
        "outpost enip probe 192.168.0.20 --path 1,0 --point Motor.Speed:REAL "
        "--point Program:Main.Count:DINT",
        "outpost enip probe --config /etc/outpost/outpost.toml --device press-3",
        "outpost enip browse 192.168.0.20",
    )},
    ".venv/bin/python -m bench.bridge.s7": (NotRunnable(BENCH),),
    ".venv/bin/python -m bench.bridge.bacnet": (NotRunnable(BENCH),),
    ".venv/bin/python -m bench.bridge.enip": (NotRunnable(BENCH),),
    ".venv/bin/python -m pytest tests/bridge": (
        NotRunnable("the bridge test suite itself: a test cannot run the suite it is part of"),
    ),
    ".venv/bin/python -m bench.bridge.run": (NotRunnable(BENCH),),
    ".venv/bin/python -m bench.bridge.run --connections 5 --json bridge-bench.json": (
        NotRunnable(BENCH),
    ),
    # docs/cloud.md
    "python -m cloud_spark silver ◄────────────────────┘": (
        NotRunnable("a line of the pipeline diagram, not a command"),
    ),
    "python -m cloud_spark land --broker cloud-broker:1883 --topic 'outpost/#' --share landers "
    "--client-id outpost-lander-c --root /data/landing --leave": (
        NotRunnable("needs the cloud broker host of the example; `land --leave` runs against "
                    "mosquitto in tests/cloud_spark/test_lander_flow.py"),
    ),
    **{line: (Synopsis(),) for line in (
        "python -m cloud_spark land --broker HOST:PORT --topic FILTER [--topic FILTER …]",
        "python -m cloud_spark silver       --root PATH --out PATH [--prefix P] "
        "[--uplink-topic T] [--late-after-s S] [--full]",
        "python -m cloud_spark rollups      --out PATH [--grains 1m,15m,1h,1d] [--max-hold-s S]",
        "python -m cloud_spark alarms       --out PATH",
        "python -m cloud_spark availability --out PATH [--expected-interval-s S] "
        "[--gap-factor F]",
        "python -m cloud_spark quality      --out PATH [--range POINT=MIN:MAX …] "
        "[--stuck-after-s S]",
        "python -m cloud_spark health       --out PATH [--window-s S] [--full]",
        "python -m cloud_spark report       --out PATH [--json FILE]",
        "python -m cloud_spark maintain     --out PATH [--vacuum-hours H] [--no-vacuum] "
        "[--table NAME …]",
        "python -m cloud_spark all          --root PATH --out PATH [--prefix P] "
        "[--uplink-topic T] [--full]",
    )},
    "python -m cloud_spark report --out s3a://bucket/tables --json /tmp/report.json": (
        NotRunnable("needs an S3 bucket (no network here) and a Spark session, tens of seconds; "
                    "the report job runs on local tables in tests/cloud_spark"),
    ),
    # bench/README.md, bench/cloud/README.md
    **{line: (NotRunnable(BENCH),) for line in (
        ".venv/bin/python -m bench.compare --json bench-results.json",
        ".venv/bin/python -m bench.compare --generator go --scenarios fan-in,fan-out,qos1",
        ".venv/bin/python -m bench.instructions --json instructions.json",
        ".venv/bin/python -m bench.compare --brokers mosquitto,outpost,moquette,aedes "
        "--scenarios fan-in,fan-out,qos1",
        ".venv/bin/python -m bench.instructions --scenarios qos1,idle",
        ".venv/bin/python -m bench.loadgen fan-in --port 1883 --broker-pid $(pidof mosquitto)",
        ".venv/bin/python -m bench.websocket --messages 20000 --size 64 --runs 3",
        ".venv/bin/python -m bench.cloud.run_bench --rows 10000000 --work /tmp/outpost-bench",
    )},
    **{line: (Synopsis(),) for line in (
        ".venv/bin/python -m bench.cloud.tsbs_iot --rows 1000000 --out /tmp/landing [--seed 7]",
        ".venv/bin/python -m bench.cloud.run_bench --rows 10000000 --work /tmp/outpost-bench "
        "[--master local[2]] [--driver-memory SIZE] [--shuffle-partitions 8] "
        "[--new-rows 100000] [--steps plain,silver,rollups,incremental] "
        "[--plain-format delta|parquet] [--conf KEY=VALUE …] [--json FILE]",
        ".venv/bin/python -m bench.cloud.lander_rate [--messages 5000] [--max-inflight 64] "
        "[--roll-seconds 5] [--receive-maximum 1000]",
        ".venv/bin/python -m bench.cloud.history_cost [--history 10000,500000] "
        "[--new-rows 10000]",
        ".venv/bin/python -m bench.cloud.lander_s3 [--batched] [--backlog 40000] "
        "[--gateways 100] [--s3-delay-ms 0] [--rounds 1] [--json FILE]",
        ".venv/bin/python -m bench.cloud.s3_clients [--objects 200] [--threads 8]",
    )},
    ".venv/bin/python -m bench.fleet.run": (NotRunnable(BENCH),),
    ".venv/bin/python -m bench.fleet.run --batched --steps backlog --backlog 400000": (
        NotRunnable(BENCH),
    ),
    ".venv/bin/python -m bench.fleet.run --steps backlog": (NotRunnable(BENCH),),
    ".venv/bin/python -m bench.fleet.run --batched --steps live --seconds 10": (
        NotRunnable(BENCH),
    ),
    ".venv/bin/python -m bench.cloud.tsbs_iot --rows 1000000 --out /tmp/tsbs/landing": (
        NotRunnable(BENCH),
    ),
    ".venv/bin/python -m cloud_spark all --root /tmp/tsbs/landing --out /tmp/tsbs/tables": (
        NotRunnable("Spark over the million rows of the benchmark line before it: minutes; "
                    "`cloud_spark all` runs on small landings in tests/cloud_spark"),
    ),
    ".venv/bin/python -m bench.cloud.run_bench --rows 10000000 --work /tmp/outpost-bench": (
        NotRunnable(BENCH),
    ),
    # docs/getting-started.md (and the same lines in docs/operations.md)
    "outpost modbus probe --serial /dev/ttyUSB0 --baudrate 9600 --parity N --unit-id 1 "
    "--map profile:eastron-sdm630": (RunElsewhere(GETTING_STARTED),),
    "outpost check-config /etc/outpost/outpost.toml": (
        Run(r"outpost\.toml: OK"),
        RunElsewhere(GETTING_STARTED),
    ),
    "outpost run --config /etc/outpost/outpost.toml --state-dir /var/lib/outpost": (
        RunElsewhere(GETTING_STARTED),
    ),
    "mosquitto_sub -h 127.0.0.1 -p 1883 -t 'devices/meter-1/#' -v": (
        RunElsewhere(GETTING_STARTED),
    ),
    "outpost status --config /etc/outpost/outpost.toml": (
        Run(r"(?m)^outpost \S+ \(outpost [0-9.]+\)", gateway=True),
        RunElsewhere(GETTING_STARTED),
    ),
    "mosquitto_sub -h cloud.example.com -p 1883 -t 'site-1/meter-1/#' -v": (
        RunElsewhere(GETTING_STARTED),
    ),
    # docs/operations.md
    "systemctl daemon-reload && sudo systemctl restart systemd-journald": (
        NotRunnable(NO_SYSTEMD),
    ),
    "systemctl enable --now outpost": (NotRunnable(NO_SYSTEMD),),
    "systemctl edit outpost": (NotRunnable(NO_SYSTEMD),),
    "systemctl restart outpost": (NotRunnable(NO_SYSTEMD),),
    "journalctl -u outpost -f": (NotRunnable(NO_SYSTEMD),),
    "journalctl -u outpost -p warning -S today": (NotRunnable(NO_SYSTEMD),),
    "journalctl -u outpost CLIENT_ID=plc-7": (NotRunnable(NO_SYSTEMD),),
    "journalctl -u outpost DEVICE=meter-1 -o verbose": (NotRunnable(NO_SYSTEMD),),
    "systemctl reload outpost": (NotRunnable(NO_SYSTEMD),),
    "systemctl stop outpost": (NotRunnable(NO_SYSTEMD),),
    "systemctl start outpost": (NotRunnable(NO_SYSTEMD),),
    "outpost db backup /var/backups/outpost/outpost-$(date +%F).db": (
        Run(r"backed up \S+/outpost\.db to \S+/outpost-\d{4}-\d\d-\d\d\.db\n(.*\n)*"
            r"quick_check\s+ok", gateway=True),
    ),
    "outpost db backup /var/backups/outpost/before-restore.db": (
        Run(r"backed up \S+/outpost\.db to \S+/before-restore\.db", gateway=True),
    ),
    "outpost db check --state-dir /var/lib/outpost": (Run(r"^ok\n$", gateway=True),),
    "python -m cloud_spark.fleet keygen --out /srv/fleet/keys --key-id fleet-1": (
        RunElsewhere("tests/cloud_spark/test_fleet_cli.py::test_keygen_makes_a_key_pair_once"),
    ),
    "python -m cloud_spark.fleet config send --broker mqtt.example.com:8883 --tls-ca ca.pem "
    "--tls-cert deploy.pem --tls-key deploy.key --gateway 'plant-*' --config plant-map.toml "
    "--signing-key /srv/fleet/keys/fleet-1.key": (
        RunElsewhere("tests/outpost/test_remote_config.py::"
                     "test_the_cloud_command_sends_to_a_pattern_and_shows_each_result"),
    ),
    "python -m cloud_spark.fleet config send --broker mqtt.example.com:8883 --tls-ca ca.pem "
    "--tls-cert deploy.pem --tls-key deploy.key --gateway 'plant-*' --part devices --config "
    "line-2-meters.toml --signing-key /srv/fleet/keys/fleet-1.key": (
        RunElsewhere("tests/outpost/test_remote_config.py::test_the_cloud_command_sends_a_part"),
    ),
    "python -m cloud_spark.fleet token add --registry /srv/fleet/registry.json --uses 200 "
    "--valid-days 30 --allow 'plant-*'": (
        RunElsewhere("tests/cloud_spark/test_fleet_cli.py::test_token_add_records_a_token"),
    ),
    "python -m cloud_spark.fleet enroll serve --broker mqtt.example.com:8883 --tls-ca "
    "fleet-ca.pem --tls-cert enroll-service.pem --tls-key enroll-service.key --registry "
    "/srv/fleet/registry.json --ca-cert fleet-ca.pem --ca-key fleet-ca.key": (
        NotRunnable("needs the cloud broker at mqtt.example.com and runs until stopped; "
                    "tests/outpost/test_enroll.py runs the same service against a local "
                    "mosquitto with TLS and client certificates"),
    ),
    "outpost enroll --provisioning /boot/firmware/outpost/provision.toml --state-dir "
    "/var/lib/outpost --config /etc/outpost/outpost.toml": (
        RunElsewhere("tests/outpost/test_enroll.py::"
                     "test_a_card_enrolls_then_connects_with_its_own_certificate"),
    ),
    "outpost config history": (
        RunElsewhere("tests/outpost/test_remote_config.py::test_history_show_and_rollback_by_hand"),
    ),
    # docs/security.md
    "outpost passwd /etc/outpost/passwd alice": (
        Run(r"added user 'alice'", prompts=("alice-secret", "alice-secret"),
            user=("alice", False)),
    ),
    "printf '%s\\n' \"$PW\" | outpost passwd --stdin /etc/outpost/passwd alice": (
        Run(r"updated user 'alice'", user=("alice", True)),
    ),
    "outpost passwd -D /etc/outpost/passwd alice": (
        Run(r"deleted user 'alice'", user=("alice", True)),
    ),
    "outpost passwd --iterations 100000 FILE USER": (
        Run(r"updated user 'bob'", prompts=("bob-2", "bob-2"), user=("bob", True)),
    ),
    # docs/storage.md
    **{line: (NotRunnable(BENCH),) for line in (
        ".venv/bin/python -m bench.storage.throughput --window 2000",
        ".venv/bin/python -m bench.storage.write_amp",
        ".venv/bin/python -m bench.storage.reconnect --drain 1000000",
        ".venv/bin/python -m bench.storage.startup",
    )},
    # docs/history.md
    "outpost history POINT... [--since T] [--until T] [--step D] [--max-points N] [--json] "
    "[--state-dir DIR]": (Synopsis(),),
    **{line: (NotRunnable("needs the history of a gateway whose device 'boiler' has been "
                          "recorded; tests/outpost/test_history.py runs outpost history "
                          "against a gateway polling the pymodbus simulator"),)
       for line in ("outpost history boiler/temp --since=-3m",
                    "outpost history boiler/temp --since=-24h")},
    ".venv/bin/python -m bench.history_bench --rates 1000 --warmup 20 --duration 660": (
        NotRunnable(BENCH),
    ),
    ".venv/bin/python -m bench.history_bench --rates 1000,10 --warmup 20 --duration 240 "
    "--compact-interval 60": (NotRunnable(BENCH),),
}

DOCUMENTED = documented_commands()


def test_every_documented_command_is_classified() -> None:
    missing = {line: where for line, where in DOCUMENTED.items() if line not in COMMANDS}
    assert not missing, (
        "command lines in the docs that tests/test_docs_cli.py does not classify (add each to "
        "COMMANDS: Run, RunElsewhere, Synopsis or NotRunnable with the reason):\n"
        + "\n".join(f"  {where[0]}: {line}" for line, where in missing.items()))
    stale = sorted(set(COMMANDS) - set(DOCUMENTED))
    assert not stale, f"COMMANDS lists lines that are no longer in the docs: {stale}"


def test_tests_named_by_the_table_exist() -> None:
    for entries in COMMANDS.values():
        for entry in entries:
            if isinstance(entry, RunElsewhere):
                path, _, name = entry.test.partition("::")
                assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), entry.test


def test_extraction_reads_commands_the_way_a_reader_does() -> None:
    """`$ ` prompts, `sudo`, comments and continuations; output lines are not commands."""
    sample = ("```console\n$ sudo outpost status   # here\noutpost plant-7 (outpost 0.1)\n```\n"
              "```sh\noutpost db check \\\n    --full\nls -l\n```\n"
              "```toml\noutpost = 1\n```\n")
    assert list(commands_in("x.md", sample)) == [("outpost status", "x.md:2"),
                                                 ("outpost db check --full", "x.md:6")]


# -- running them ----------------------------------------------------------------------------

RUNS = [(line, entry) for line, entries in COMMANDS.items() for entry in entries
        if isinstance(entry, Run)]
SYNOPSES = [line for line, entries in COMMANDS.items()
            if any(isinstance(entry, Synopsis) for entry in entries)]


@dataclass
class Machine:
    """What the docs' names stand for on this machine."""

    root: Path
    etc: Path
    state: Path
    backups: Path
    bin: Path

    @property
    def config(self) -> Path:
        return self.etc / "outpost.toml"

    def local(self, line: str) -> str:
        """The line with the docs' placeholders replaced by this machine's paths."""
        replacements = [
            ("/etc/outpost/", f"{self.etc}/"),
            ("/var/lib/outpost", str(self.state)),
            ("/var/backups/outpost", str(self.backups)),
            ("BAD-FILE", str(self.etc / "bad.toml")),
            ("--config FILE", f"--config {self.etc / 'run.toml'}"),
            ("FILE", str(self.etc / "passwd") if "passwd" in line else str(self.config)),
            ("USER", "bob"),
            (STATE, f"--state-dir {self.state}"),
            ("DIR", str(self.root / "run-state")),
            ("HOST:PORT", "127.0.0.1:0"),
            ("CLIENT", "sleeper"),
            ("FILTER", "'docs/#'"),
            ("DEST", str(self.backups / "synopsis.db")),
        ]
        for name, here in replacements:
            line = line.replace(name, here)
        if line.startswith("outpost status") and "--config" not in line:
            line += f" --config {self.config}"  # its default, /etc/outpost/outpost.toml
        if line.startswith("outpost db ") and "--state-dir" not in line:
            line += f" --state-dir {self.state}"  # its default, /var/lib/outpost
        return line

    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "PW": "pw-secret",
                "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    root = tmp_path_factory.mktemp("docs-cli")
    etc, state, backups, bin_dir = (root / name for name in ("etc", "state", "backups", "bin"))
    shutil.copytree(ROOT / "docs" / "examples", etc)
    (etc / "passwd").unlink()  # the first `outpost passwd` line creates it, in table order
    for path in (state, backups, bin_dir):
        path.mkdir()
    (bin_dir / "outpost").write_text(f'#!/bin/sh\nexec {sys.executable} -m outpost "$@"\n',
                                     encoding="utf-8")
    (bin_dir / "outpost").chmod(0o755)
    # A wrapper, not a symlink: a venv's python finds its site-packages (pyvenv.cfg) only when
    # it is started from its own directory.
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n', encoding="utf-8")
    (bin_dir / "python").chmod(0o755)
    status_port = free_port()
    (etc / "outpost.toml").write_text(
        f'gateway_id = "docs-gateway"\n\n[status]\nbind = "127.0.0.1:{status_port}"\n',
        encoding="utf-8")
    (etc / "run.toml").write_text('gateway_id = "docs-run"\n\n[status]\nenabled = false\n',
                                  encoding="utf-8")  # the synopsis' run, beside the gateway
    (etc / "bad.toml").write_text('[limits]\nqueue_overflow = "drop-all"\n', encoding="utf-8")
    return Machine(root, etc, state, backups, bin_dir)


@pytest.fixture(scope="module")
def gateway(machine: Machine) -> Iterator[Machine]:
    """A real `outpost run` on the machine's state dir, with something stored to look at."""
    process, _ = launch(
        [sys.executable, "-m", "outpost", "run", "--config", str(machine.config),
         "--listen", "127.0.0.1:0", "--state-dir", str(machine.state)],
        machine.root / "gateway.log", timeout=30)
    try:
        store_examples(process.port)
        yield machine
    finally:
        process.stop()


def store_examples(port: int) -> None:
    """A retained message, and a persistent session `sleeper` with a QoS 1 message queued."""
    subscribed = threading.Event()
    sleeper = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="sleeper", clean_session=False)
    sleeper.on_subscribe = lambda *_: subscribed.set()
    sleeper.connect("127.0.0.1", port)
    sleeper.loop_start()
    sleeper.subscribe("docs/queued", qos=1)
    assert subscribed.wait(10), "no SUBACK"
    sleeper.disconnect()
    sleeper.loop_stop()
    publisher = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="docs-publisher")
    publisher.connect("127.0.0.1", port)
    publisher.loop_start()
    publisher.publish("docs/retained", b"21.5", qos=1, retain=True).wait_for_publish(10)
    publisher.publish("docs/queued", b"queued", qos=1).wait_for_publish(10)
    publisher.disconnect()
    publisher.loop_stop()


def run_on_a_terminal(line: str, machine: Machine, answers: tuple[str, ...]) -> tuple[int, str]:
    """Run `line` on a pty (util-linux `script`), typing an answer at each prompt."""
    process = subprocess.Popen(["script", "--quiet", "--return", "--command", line, "/dev/null"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, cwd=machine.root,
                               env={**machine.env(), "SHELL": "/bin/bash"})
    assert process.stdin is not None and process.stdout is not None
    output = b""
    pending = list(answers)
    answered = 0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if not select.select([process.stdout], [], [], 1)[0]:
                continue
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            output += chunk
            if pending and output[answered:].rstrip().endswith(b":"):  # a new prompt
                process.stdin.write(pending.pop(0).encode() + b"\n")
                process.stdin.flush()
                answered = len(output)
                if not pending:
                    process.stdin.close()  # script ends only at the end of its input
        return process.wait(30), output.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


@pytest.mark.parametrize(("documented", "entry"), RUNS,
                         ids=[entry.line or line for line, entry in RUNS])
def test_documented_command_runs(documented: str, entry: Run, machine: Machine,
                                 request: pytest.FixtureRequest) -> None:
    if entry.gateway:
        request.getfixturevalue("gateway")
    if entry.user:
        given_user(machine, *entry.user)
    line = machine.local(entry.line or documented)
    if entry.server:
        server, printed = launch(["bash", "-c", f"exec {line}"], machine.root / "server.log",
                                 timeout=30, environ=machine.env())
        code = server.stop()  # SIGTERM, as systemd stops it
        output = "".join(printed) + server.log()
    elif entry.prompts:
        code, output = run_on_a_terminal(line, machine, entry.prompts)
    else:
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True,
                              cwd=machine.root, env=machine.env(), timeout=60, check=False)
        code, output = done.returncode, done.stdout + done.stderr
    assert code == entry.exit, f"{documented}\nran: {line}\nexit {code}\n{output}"
    assert re.search(entry.shows, output), f"{documented}\nran: {line}\n{output}"
    check_password_file(documented, entry, machine)
    if "$(date +%F)" in documented:
        assert (machine.backups / f"outpost-{date.today():%Y-%m-%d}.db").stat().st_size > 0


def given_user(machine: Machine, name: str, present: bool) -> None:
    """Bring the password file to the state a documented `outpost passwd` line starts from."""
    passwd = machine.etc / "passwd"
    users = parse_password_text(passwd.read_text(encoding="utf-8")) if passwd.exists() else {}
    if (name in users) == present:
        return
    command = ["--stdin", str(passwd), name] if present else ["-D", str(passwd), name]
    subprocess.run([sys.executable, "-m", "outpost", "passwd", *command], input="given-secret\n",
                   capture_output=True, text=True, env=machine.env(), timeout=60, check=True)


def check_password_file(documented: str, entry: Run, machine: Machine) -> None:
    """What `outpost passwd` promises, without output: the file (0600) has the user, hashed
    with the documented iterations, and the password typed or piped verifies against it."""
    if "passwd" not in documented:
        return
    passwd = machine.etc / "passwd"
    assert passwd.stat().st_mode & 0o777 == 0o600, "outpost passwd creates the file 0600"
    users = parse_password_text(passwd.read_text(encoding="utf-8"))
    if documented.startswith("outpost passwd -D"):
        assert "alice" not in users
        return
    user = users["bob" if "USER" in documented else "alice"]
    assert user.iterations == (100_000 if "--iterations 100000" in documented else 210_000)
    typed = entry.prompts[0] if entry.prompts else machine.env()["PW"]
    assert verify(user, typed.encode())


@pytest.mark.parametrize("synopsis", SYNOPSES)
def test_synopsis_options_exist(synopsis: str, machine: Machine) -> None:
    """Each alternative's command words + --help: every --option the synopsis names is there."""
    for alternative in synopsis.split(" | "):
        words = alternative.split()
        if words[0].endswith("/python"):  # .venv/bin/python: this checkout's python on PATH
            words[0] = "python"
        command = [w for i, w in enumerate(words[:4])
                   if re.fullmatch(r"-m|[a-z_][a-z_-]*", w) or (i and words[i - 1] == "-m")]
        # from the checkout, as the benchmark READMEs say (`bench` is not an installed package)
        done = subprocess.run(["bash", "-c", " ".join([*command, "--help"])], capture_output=True,
                              text=True, cwd=ROOT, env=machine.env(), timeout=60, check=False)
        assert done.returncode == 0, f"{alternative}\n{done.stderr}"
        for option in re.findall(r"--[a-z][a-z-]*", alternative):
            assert option in done.stdout, f"{alternative}: {option} is not in --help"

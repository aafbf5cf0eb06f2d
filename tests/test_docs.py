"""Every configuration key and every `outpost` command is documented (README.md or docs/), and
every example runs as written: each ```toml block passes `outpost check-config` (with the files
it names, from docs/examples/), the `modbus plan` sample is the plan of its example, and each
documented `outpost modbus probe` line reads a simulator on its transport.

A configuration key counts as documented only where the documentation ties it to its section.
For the key path `uplink.remotes.keepalive` (section `uplink.remotes`, key `keepalive`) that is
one of:

* a fenced ```` ```toml ```` block in which the key sits at that path: `keepalive = 60` under
  `[[uplink.remotes]]`, or inside an inline table (`tls = { insecure = false }` under
  `[[uplink.remotes]]` documents `uplink.remotes.tls.insecure`), or as a dotted key. Blocks
  are parsed with `tomllib`, so headers, arrays of tables and inline tables mean what they
  mean to outpost; a key only mentioned in a `#` comment does not count, and every block must
  be valid TOML;
* a Markdown table whose first header cell names the section as a TOML header (`` `[sys]` ``,
  `` `[[uplink.remotes]]` ``), with the key in backticks in the first cell of a row
  (`` `keepalive` ``; several as `` `ca_file`, `cert_file` ``; `` `tls.insecure` `` for a key
  of a nested section).

A key named only in prose, in a comment or in a table without a `[section]` header does not
count. A section (`limits`, `bridge.buses.rs485`) is documented the same way as a key: its header or
inline table in a TOML block, or a row of its parent's table. Every key in a TOML block must
also be a real key path, so examples cannot drift from the models; the contents of free-form
tables (`groups`, `commands`, `enum`) are not checked.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from bench.bridge.simulator import Simulator
from outpost.cli import build_parser
from outpost.config import Config
from tests.bridge.support import SocatPair
from tests.gateway.broker.auth.support import make_pki

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEXTS = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in FILES}
DOCS = "".join(TEXTS.values())

TOML_BLOCK = re.compile(r"^[ \t]*```toml[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
SECTION_CELL = re.compile(r"^`\[\[?([A-Za-z0-9_.]+)\]\]?`")
KEY_IN_CELL = re.compile(r"`([A-Za-z0-9_.]+)`")


def config_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key path of the configuration models."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        pending = [field.annotation]
        while pending:
            annotation = pending.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                yield from config_keys(annotation, path + ".")
            pending.extend(typing.get_args(annotation))


KEYS = sorted(set(config_keys(Config)))
SECTIONS = {key.rsplit(".", 1)[0] for key in KEYS if "." in key}


def toml_blocks() -> Iterator[tuple[str, int, str]]:
    """(file, line, text) of every fenced ```toml block."""
    for name, text in TEXTS.items():
        for match in TOML_BLOCK.finditer(text):
            yield name, text.count("\n", 0, match.start()) + 1, match.group(1)


def toml_paths(value: object, prefix: str = "") -> Iterator[str]:
    """Key paths in a parsed TOML document; array elements share their array's path.

    Only descends into tables that are configuration sections, so the keys of free-form
    tables (`groups = { energy = 60.0 }`) are not paths.
    """
    if isinstance(value, list):
        for item in value:
            yield from toml_paths(item, prefix)
    elif isinstance(value, dict) and (not prefix or prefix[:-1] in SECTIONS):
        for key, item in value.items():
            yield prefix + key
            yield from toml_paths(item, f"{prefix}{key}.")


def table_paths(text: str) -> Iterator[str]:
    """Key paths named by Markdown tables whose first header cell is `[section]`."""
    section = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            section = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        is_header = i + 1 < len(lines) and re.match(r"^\|\s*:?-", lines[i + 1])
        if is_header:
            match = SECTION_CELL.match(cells[0])
            section = match.group(1) if match else None
        elif section is not None and not re.match(r"^:?-", cells[0]):
            for key in KEY_IN_CELL.findall(cells[0]):
                yield f"{section}.{key}"


def documented_paths() -> set[str]:
    paths: set[str] = set()
    for _name, _line, block in toml_blocks():
        with contextlib.suppress(tomllib.TOMLDecodeError):  # reported by the test below
            paths.update(toml_paths(tomllib.loads(block)))
    for text in TEXTS.values():
        paths.update(table_paths(text))
    return paths


DOCUMENTED = documented_paths()


@pytest.mark.parametrize("key", KEYS)
def test_config_key_is_documented(key: str) -> None:
    section, _, leaf = key.rpartition(".")
    where = f"[{section}]" if section else "the top level"
    assert key in DOCUMENTED, (
        f"{key} is not documented: write `{leaf} = ...` under {where} in a ```toml block of "
        f"README.md or docs/, or a row `{leaf}` in a table headed `{where}` (see the docstring)"
    )


BLOCKS = list(toml_blocks())


@pytest.mark.parametrize(("name", "line", "block"), BLOCKS,
                         ids=[f"{name}:{line}" for name, line, _ in BLOCKS])
def test_toml_block_is_valid_and_uses_real_keys(name: str, line: int, block: str) -> None:
    try:
        data = tomllib.loads(block)
    except tomllib.TOMLDecodeError as exc:
        pytest.fail(f"{name}:{line}: the ```toml block is not valid TOML: {exc}")
    unknown = sorted(set(toml_paths(data)) - set(KEYS))
    assert not unknown, f"{name}:{line}: keys that are not configuration keys: {unknown}"


def test_table_rows_use_real_keys() -> None:
    unknown = sorted({path for text in TEXTS.values() for path in table_paths(text)} - set(KEYS))
    assert not unknown, f"tables headed `[section]` name keys that do not exist: {unknown}"


def test_rules_catch_keys_out_of_their_section() -> None:
    """A key under the wrong header, or only in a comment, or only in prose, does not count."""
    block = '[sys]\nkeepalive = 60\n# batch = 256\n[[uplink.remotes]]\nname = "cloud"\n'
    paths = set(toml_paths(tomllib.loads(block)))
    assert "uplink.remotes.name" in paths
    assert "uplink.remotes.keepalive" not in paths
    assert "uplink.remotes.batch" not in paths
    table = "| `[[uplink.remotes]]` key | meaning |\n|---|---|\n| `tls.insecure`, `batch` | x |\n"
    assert set(table_paths(table)) == {"uplink.remotes.tls.insecure", "uplink.remotes.batch"}
    assert not set(table_paths("| key | meaning |\n|---|---|\n| `batch` | x |\n"))


def subcommands() -> list[str]:
    parser = build_parser()
    actions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sorted(actions[0].choices)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", subcommands())
def test_command_is_documented(command: str) -> None:
    assert f"outpost {command}" in DOCS, f"`outpost {command}` is not in README.md or docs/"


# -- every example runs as written ---------------------------------------------------------------
#
# The examples are written for /etc/outpost/outpost.toml. A copy of docs/examples/ stands for
# /etc/outpost/ (the files the examples name), plus the TLS files a real installation gets
# from its operator, made here with openssl; the examples' /etc/outpost/ paths point there.

EXAMPLES = ROOT / "docs" / "examples"
ETC = "/etc/outpost/"


def outpost(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outpost", *args], capture_output=True,
                          text=True, cwd=cwd, check=False, timeout=120)


@pytest.fixture(scope="module")
def etc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for /etc/outpost/: docs/examples/ and a test PKI under the examples' names."""
    root = tmp_path_factory.mktemp("etc-outpost")
    shutil.copytree(EXAMPLES, root, dirs_exist_ok=True)
    for secret in ("passwd", "status.passwd", "uplink-password"):
        (root / secret).chmod(0o600)  # git does not keep the mode these files are made with
    pki = make_pki(root / "pki", clients=("alice",))
    alice_cert, alice_key = pki.clients["alice"]
    (root / "tls").mkdir()
    for name, source in {"tls/server.pem": pki.server_cert, "tls/server.key": pki.server_key,
                         "tls/clients-ca.pem": pki.ca, "ca.pem": pki.ca,
                         "client.pem": alice_cert, "client.key": alice_key,
                         "status.crt": pki.server_cert, "status.key": pki.server_key}.items():
        shutil.copy(source, root / name)
    return root


def as_installed(text: str, etc: Path) -> str:
    return text.replace(ETC, f"{etc}/")


@pytest.mark.parametrize(("name", "line", "block"), BLOCKS,
                         ids=[f"{name}:{line}" for name, line, _ in BLOCKS])
def test_toml_example_passes_check_config(name: str, line: int, block: str, etc: Path) -> None:
    path = etc / f"example-{Path(name).stem}-{line}.toml"
    path.write_text(as_installed(block, etc), encoding="utf-8")
    done = outpost("check-config", str(path))
    assert done.returncode == 0, f"{name}:{line}: outpost check-config says\n{done.stderr}"


def marked_block(text: str, marker: str) -> str:
    """The fenced block right after `<!-- marker -->`."""
    match = re.search(rf"<!-- {re.escape(marker)} -->\n```[a-z]*\n(.*?)^```", text,
                      re.MULTILINE | re.DOTALL)
    assert match, f"no block marked <!-- {marker} -->"
    return match.group(1)


def test_bridge_plan_sample_is_the_plan_of_the_example(etc: Path) -> None:
    text = TEXTS["docs/bridge.md"]
    path = etc / "bridge-example.toml"
    path.write_text(marked_block(text, "example: bridge-config"), encoding="utf-8")
    done = outpost("modbus", "plan", str(path))
    assert done.returncode == 0, done.stderr
    expected = marked_block(text, "output of: outpost modbus plan, for the example bridge-config")
    assert done.stdout == expected


def cli_examples(command: str) -> list[tuple[str, str]]:
    """(file, line) of every documented command line starting with `command`."""
    return [(name, line.strip()) for name, text in TEXTS.items()
            for line in text.splitlines() if line.strip().startswith(command + " ")]


PROBES = cli_examples("outpost modbus probe")


@pytest.fixture(scope="module")
def simulators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Units 1-3 on Modbus TCP, RTU over TCP and a pty: the endpoint each option gets."""
    logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
    pair = SocatPair(tmp_path_factory.mktemp("pty")).start()
    sims = [Simulator([1, 2, 3], "tcp", size=1000), Simulator([1, 2, 3], "rtu-over-tcp",
                                                              size=1000),
            Simulator([1, 2, 3], "rtu", device=str(pair.b), size=1000, baudrate=9600)]
    ports = [sim.start() for sim in sims]
    yield {"--tcp": f"127.0.0.1:{ports[0]}", "--rtu-over-tcp": f"127.0.0.1:{ports[1]}",
           "--serial": str(pair.a)}
    for sim in sims:
        sim.stop()
    pair.stop()


@pytest.mark.parametrize(("name", "command"), PROBES, ids=[c for _, c in PROBES])
def test_probe_example_runs_against_a_simulator(
    name: str, command: str, simulators: dict[str, str], etc: Path
) -> None:
    """Each documented probe, with its endpoint replaced by a simulator on the same transport."""
    args = shlex.split(command)[1:]
    for option, endpoint in simulators.items():
        if option in args:
            args[args.index(option) + 1] = endpoint
    done = outpost(*args, cwd=etc)  # a --map path is relative to where the user stands
    assert done.returncode == 0, f"{name}: {command}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), command

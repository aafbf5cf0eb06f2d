"""The remote update trigger's shared parts: its configuration, the command, the spool files.

How this works: the gateway (`outpost run`, an unprivileged user) takes an update command from
the cloud, checks it with `parse_command`, and writes it as the request file of the `Spool`
(the state directory). A root service (outpost-update.service, started by a systemd path unit
when the request file appears) reads it back with the same checks, installs, and writes its
progress and result to the spool's state file, which the gateway reads and reports to the
cloud. The health check after each boot writes the running slot and version next to them.

The root side never follows a symbolic link in the state directory (which the unprivileged
user owns): files are read with O_NOFOLLOW and written to a fresh temporary file (O_EXCL)
that is renamed over the target.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from gateway.base.config_paths import existing_file
from gateway.base.settings import Section
from gateway.broker.codec.errors import MQTTProtocolError
from gateway.broker.codec.topics import validate_topic_name

DEFAULT_COMMAND_TOPIC = "outpost-cmd/{gateway_id}/update"
STATUS_SUBTOPIC = "update"  # <status topic>/update: retained, the latest request and the slot
REFUSED_SUBTOPIC = "update/refused"  # <status topic>/update/refused: commands not taken
MAX_COMMAND_BYTES = 4096
MAX_FILE_BYTES = 1 << 20
DONE_KEPT = 100  # completed request ids remembered (a repeated one is refused)
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


class CommandSection(Section):
    """A section taking commands from the cloud on a topic of the remote broker (updates,
    configurations): `enabled` and `command_topic`, default `DEFAULT_TOPIC`."""

    DEFAULT_TOPIC: ClassVar[str] = DEFAULT_COMMAND_TOPIC

    enabled: bool = False
    command_topic: str | None = Field(
        default=None,
        description='the topic on the remote broker the cloud publishes these commands to; '
        'default "outpost-cmd/<gateway_id>/update" ([remote_update]) or ".../config" '
        '([remote_config]); an [[uplink.inbound]] rule must bring it in',
    )

    @field_validator("command_topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                validate_topic_name(value)
            except MQTTProtocolError as exc:
                raise ValueError(exc.reason) from None
        return value

    def remote_command_topic(self, gateway_id: str) -> str:
        """The command topic on the remote; raises ValueError when the default cannot be made
        from `gateway_id`."""
        if self.command_topic is not None:
            return self.command_topic
        topic = self.DEFAULT_TOPIC.format(gateway_id=gateway_id)
        try:
            validate_topic_name(topic)
        except MQTTProtocolError as exc:
            raise ValueError(f"the default command topic {topic!r}: {exc.reason} "
                             "(set command_topic)") from None
        return topic


class RemoteUpdateConfig(CommandSection):
    """The `[remote_update]` section: updates triggered from the cloud through the uplink."""

    ca_file: Path | None = Field(
        default=None, description="CA certificates for the HTTPS server of the bundles "
        "(default: the system's)",
    )

    @field_validator("ca_file")
    @classmethod
    def _file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else existing_file(value, info)


class CommandError(ValueError):
    """A command that is refused before anything is fetched; the text says why."""

    def __init__(self, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class UpdateCommand(BaseModel):
    """`{"url": "https://...", "sha256": "<64 hex>", "id": "<the sender's request id>"}`,
    and `"allow_downgrade": true` to install a bundle older than the running version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: Annotated[str, Field(max_length=2048)]
    sha256: str
    id: str
    allow_downgrade: bool = False  # a bundle older than the running version installs only so

    @field_validator("url")
    @classmethod
    def _https(cls, value: str) -> str:
        if not value.startswith("https://") or len(value) <= len("https://"):
            raise ValueError("must be an https:// URL")
        if not value.isprintable() or " " in value:
            raise ValueError("must not hold spaces or control characters")
        return value

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _SHA256.fullmatch(value):
            raise ValueError("must be the bundle's sha256: 64 hexadecimal digits")
        return value.lower()

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return check_request_id(value)


def check_request_id(value: str) -> str:
    """A sender's request id (reports carry it); ValueError when it is not one."""
    if not _REQUEST_ID.fullmatch(value):
        raise ValueError("must be 1 to 64 of A-Z a-z 0-9 . _ : -")
    return value


def problems_of(exc: ValidationError, what: str) -> str:
    """A model's validation errors as `field: problem; ...` for a refusal."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or what
        text = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        problems.append(f"{where}: {text.removeprefix('Value error, ')}")
    return "; ".join(problems)


def parse_command(payload: bytes) -> UpdateCommand:
    """The command in `payload`, or CommandError naming every problem (and the request id
    when one could be read, so the refusal can carry it)."""
    if len(payload) > MAX_COMMAND_BYTES:
        raise CommandError(f"the command is {len(payload)} bytes, at most "
                           f"{MAX_COMMAND_BYTES} are read")
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CommandError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CommandError(f"not a JSON object but {type(data).__name__}")
    raw_id = data.get("id")
    request_id = raw_id if isinstance(raw_id, str) and _REQUEST_ID.fullmatch(raw_id) else None
    try:
        return UpdateCommand.model_validate(data)
    except ValidationError as exc:
        raise CommandError(problems_of(exc, "command"), request_id) from None


BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


def boot_id(path: Path = BOOT_ID_FILE) -> str | None:
    """This boot's id (Linux), None where there is none. OUTPOST_BOOT_ID when set: the
    sandbox of outpost.service hides /proc/sys, so the unit passes systemd's `%b`."""
    given = os.environ.get("OUTPOST_BOOT_ID", "").strip()
    if given:
        return given.replace("-", "").lower()
    try:
        return path.read_text(encoding="ascii").strip().replace("-", "").lower() or None
    except OSError:
        return None


def now_text() -> str:
    """UTC, to the second, as the reports show it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Spool:
    """The files of the remote update in the state directory."""

    state_dir: Path

    @property
    def request(self) -> Path:
        """Written by the gateway, consumed (removed) by the root runner."""
        return self.state_dir / "update-request.json"

    @property
    def state(self) -> Path:
        """Written by the root runner: the current or last request, the completed ids."""
        return self.state_dir / "update-state.json"

    @property
    def running(self) -> Path:
        """Written by the health check after each boot: the booted slot and its version, with
        the boot's id (a file left by the previous boot says nothing of this one)."""
        return self.state_dir / "update-running.json"


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path` (never through a symbolic link), None when it is missing.

    Raises ValueError when it is not a readable JSON object of at most MAX_FILE_BYTES.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"{path}: cannot open: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{path}: not JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: not a JSON object")
    return value


def write_json(path: Path, value: dict[str, Any], durable: bool = True) -> None:
    """Replace `path` atomically (a fresh temporary file renamed over it; fsync'd when
    `durable`), readable by the gateway's user."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(value, sort_keys=True) + "\n")
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

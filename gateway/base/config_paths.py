"""Files named in the configuration are relative to the configuration file.

`parse_config` validates with the context `{"base_dir": <the file's folder>}`; validators of
every section (listeners, uplink TLS) resolve their paths here, so a relative path means the
same thing whatever the working directory (systemd starts the daemon in `/`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationInfo


def resolve(path: Path, info: ValidationInfo) -> Path:
    """`path` made absolute against the configuration file's folder (when there is one)."""
    base = (info.context or {}).get("base_dir")
    return path if path.is_absolute() or base is None else Path(base) / path


def existing_file(path: Path, info: ValidationInfo) -> Path:
    """`resolve(path)`, which must be a file (ValueError names it otherwise)."""
    resolved = resolve(path, info)
    if not resolved.is_file():
        raise ValueError(f"no such file: {resolved}")
    return resolved

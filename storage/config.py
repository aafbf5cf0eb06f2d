"""The `[storage]` section: where the SQLite store lives and how hard it commits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from gateway.base.settings import Section


class StorageConfig(Section):
    """The SQLite store under the state directory."""

    durability: Literal["full", "normal", "memory"] = Field(
        default="full",
        description='"full": fsync per group commit (survives power loss); "normal": survives '
        'a process crash; "memory": nothing on disk',
    )
    state_dir: Path | None = Field(
        default=None, description="directory of outpost.db; `outpost run --state-dir` overrides"
    )
    commit_interval_ms: Annotated[float, Field(ge=0, le=1000)] = Field(
        default=2.0, description="how long a group commit may wait to gather more work"
    )
    ack_hold_ms: Annotated[float, Field(ge=0, le=10_000)] = Field(
        default=1000.0, description="how long the PUBACKs of a slow publisher that keeps several "
        "messages in flight may wait so its messages share one commit (flash wear; 0: never)"
    )
    queue_page: Annotated[int, Field(ge=10, le=100_000)] = Field(
        default=1000, description="queued messages per offline session kept in memory"
    )
    max_db_bytes: Annotated[int, Field(ge=1 << 20)] = 2 << 30
    min_free_bytes: Annotated[int, Field(ge=0)] = 64 << 20

"""The edge node's bdSeq, kept in the state directory so it survives SIGKILL and reboots.

How this works: Sparkplug 3.0 wants bdSeq to start at 0 and go up by one (modulo 256) on every
MQTT CONNECT of the edge node (`tck-id-topics-nbirth-bdseq-increment`,
`tck-id-message-flow-edge-node-birth-publish-will-message-payload-bdSeq`), so a host can tell
the death of one session from the next. `BdSeqCounter.take` hands out the next number and,
with a state directory, first writes it to `sparkplug-<group>-<node>.bdseq` (write to a
temporary file, fsync, rename, fsync the directory): a session never uses a number the file
does not hold, so after a crash or a power cut the next session takes one more. Without a
state directory the count starts at 0 at every start of the gateway.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("outpost.sparkplug")


class BdSeqCounter:
    """bdSeq of the next MQTT session, persisted when there is a state directory."""

    def __init__(self, directory: Path | None, group_id: str, node_id: str) -> None:
        self.path = None if directory is None else (
            Path(directory) / f"sparkplug-{group_id}-{node_id}.bdseq")
        self.last = self._read()

    def _read(self) -> int | None:
        if self.path is None:
            return None
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("sparkplug: %s unreadable (%s): bdSeq starts at 0", self.path, exc)
            return None
        if not text.isdigit() or int(text) > 255:
            log.warning("sparkplug: %s holds %r, not 0-255: bdSeq starts at 0", self.path,
                        text[:20])
            return None
        return int(text)

    def take(self) -> int:
        """The bdSeq of the next CONNECT (written down before it is used)."""
        value = 0 if self.last is None else (self.last + 1) % 256
        if self.path is not None:
            self._write(value)
        self.last = value
        return value

    def _write(self, value: int) -> None:
        assert self.path is not None
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with temporary.open("w", encoding="ascii") as file:
                file.write(f"{value}\n")
                file.flush()
                os.fsync(file.fileno())
            temporary.replace(self.path)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:  # the session still runs; a restart may repeat this number
            log.warning("sparkplug: cannot record bdSeq %d in %s: %s", value, self.path, exc)

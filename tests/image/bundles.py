"""Update bundles made from the built amd64 image for the QEMU update tests.

The image's root slot A (partition 2 of the disk image) is copied out, changed with debugfs
(no mount), and signed into a RAUC bundle with the image's own image/rauc/make-bundle.sh and
the development key of the build, so the device takes it like a bundle of a newer build.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.image.conftest import REPO

KEYS = REPO / "image" / "keys"
COMPATIBLE = "outpost-x86-64"
ROOT_PARTITION = 2  # slot A, as flashed


def root_partition(image: Path, target: Path) -> Path:
    """Slot A's ext4 file system, copied out of the disk image (sparse)."""
    table = json.loads(subprocess.run(["sfdisk", "--json", str(image)], check=True,
                                      capture_output=True, text=True).stdout)
    part = table["partitiontable"]["partitions"][ROOT_PARTITION - 1]
    sector = int(table["partitiontable"].get("sectorsize", 512))
    subprocess.run(["dd", f"if={image}", f"of={target}", f"bs={sector}",
                    f"skip={part['start']}", f"count={part['size']}", "conv=sparse",
                    "status=none"], check=True)
    return target


def debugfs(filesystem: Path, *commands: str) -> None:
    """Run debugfs commands read-write on an unmounted ext4 image; fail on any error."""
    result = subprocess.run(["debugfs", "-w", "-f", "-", str(filesystem)],
                            input="\n".join(commands) + "\n", capture_output=True, text=True,
                            check=True)
    errors = [line for line in result.stderr.splitlines()
              if line.strip() and not line.startswith("debugfs ")]
    if errors:
        raise RuntimeError(f"debugfs on {filesystem}: {errors}")


def put_file(filesystem: Path, scratch: Path, path: str, text: str) -> None:
    """Write `text` as `path` (absolute) into the file system, replacing what is there."""
    directory, name = path.rsplit("/", 1)
    source = scratch / f"put-{name}"
    source.write_text(text)
    source.chmod(0o644)
    listing = subprocess.run(["debugfs", "-R", f"ls -l {directory}", str(filesystem)],
                             capture_output=True, text=True, check=True).stdout
    commands = [f"cd {directory}"]
    if any(line.split()[-1:] == [name] for line in listing.splitlines()):
        commands.append(f"rm {name}")
    debugfs(filesystem, *commands, f"write {source} {name}")


def with_build(filesystem: Path, scratch: Path, build: str) -> None:
    """Set BUILD in the root's /usr/lib/outpost/release (what the device reports running)."""
    release = subprocess.run(["debugfs", "-R", "cat /usr/lib/outpost/release", str(filesystem)],
                             capture_output=True, text=True, check=True).stdout
    lines = [f"BUILD={build}" if line.startswith("BUILD=") else line
             for line in release.splitlines()]
    put_file(filesystem, scratch, "/usr/lib/outpost/release", "\n".join(lines) + "\n")


def sign(filesystem: Path, bundle: Path, version: str, build: str, description: str) -> Path:
    """A signed bundle (image/rauc/make-bundle.sh, the build's development key) of the file
    system; `filesystem` is moved into the bundle's source directory."""
    source = bundle.with_suffix(".src")
    source.mkdir()
    filesystem.rename(source / "rootfs.ext4")
    subprocess.run([str(REPO / "image/rauc/make-bundle.sh"), str(source), str(bundle),
                    COMPATIBLE, version, build, description, str(KEYS / "signing.cert.pem"),
                    str(KEYS / "signing.key.pem"), str(KEYS / "ca.cert.pem")], check=True)
    subprocess.run(["rm", "-rf", str(source)], check=True)
    return bundle

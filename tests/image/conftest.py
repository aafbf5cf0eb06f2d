"""The amd64 image, built once per test run (`make image-test`), whatever the number of workers.

`bash image/build.sh` with ARCH=amd64 writes outpost-<version>-amd64.img and leaves the staged
trees of its file systems in image/.cache/amd64/work/ (root, data, boot). Tests copy what they
boot, so the build's own output is never changed.

`make image-test` runs three pytest-xdist workers, each handed whole files: the two QEMU
machines' chains (a core each) side by side and the container and bundle tests beside them.
The first worker to need the image builds it under a lock; the others, finding the build of
the same run (PYTEST_XDIST_TESTRUNUID), take it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.image.vm import OVMF_CODE, OVMF_VARS

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "image" / "build.sh"
TOOLS = ("mmdebstrap", "systemd-nspawn", "qemu-system-x86_64", "mcopy", "grub-mkimage",
         "grub-editenv", "nsenter", "genimage")
FREE_GIB = 8  # the bootstrap cache, the staged trees, the image and the tests' copies of it


def machine_problem() -> str | None:
    """Why this machine cannot build and boot the image, or None when it can.

    The build needs root, the image tools, disk space, and mount namespaces (mmdebstrap's
    chroot mounts, systemd-nspawn's private /run); a container without them is told so
    plainly instead of failing halfway through a build.
    """
    if os.geteuid() != 0:
        return "the image tests need root (mmdebstrap, chroot, systemd-nspawn)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    missing += [str(path) for path in (OVMF_CODE, OVMF_VARS) if not path.exists()]
    if missing:
        return f"missing {', '.join(missing)}: run 'make image-packages'"
    free = shutil.disk_usage(REPO).free >> 30
    if free < FREE_GIB:
        return f"{free} GiB free next to the checkout; the image tests need {FREE_GIB} GiB"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--",
         "mount", "-t", "tmpfs", "probe", "/mnt"],
        capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"this machine cannot make mount namespaces: {probe.stderr.strip()}"
    return None


@dataclass(frozen=True)
class BuiltImage:
    """The amd64 image and the staged trees its file systems were made from."""

    image: Path
    root: Path
    data: Path
    boot: Path
    build_seconds: float


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The QEMU machines first: each file of them is a chain of boots of many minutes that one
    worker runs in order (`--dist loadfile --no-loadscope-reorder`), so the chains must start
    at once on workers of their own for the run to take as long as the longer chain."""
    items.sort(key=lambda item: 0 if item.path.name.startswith("test_qemu") else 1)


def _build(log: Path) -> tuple[Path, float]:
    """Run the amd64 build; the image's path and the seconds it took."""
    started = time.monotonic()
    env = {**os.environ, "ARCH": "amd64"}
    with log.open("w") as out:
        result = subprocess.run(["bash", str(BUILD)], env=env, stdout=subprocess.PIPE,
                                stderr=out, text=True, cwd=REPO, check=False)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        pytest.fail(f"image build failed ({result.returncode}):\n{log.read_text()[-5000:]}")
    return Path(result.stdout.strip().splitlines()[-1]), elapsed


@pytest.fixture(scope="session")
def amd64_image(tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    problem = machine_problem()
    if problem:
        pytest.skip(problem)
    cache = Path(os.environ.get("IMAGE_CACHE", REPO / "image" / ".cache"))
    cache.mkdir(parents=True, exist_ok=True)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    marker = cache / "amd64-test-build.json"
    with (cache / "amd64-test-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time: they share the staged trees
        done = json.loads(marker.read_text()) if run and marker.exists() else {}
        if run and done.get("run") == run and Path(done["image"]).exists():
            image, elapsed = Path(done["image"]), float(done["seconds"])
        else:
            image, elapsed = _build(tmp_path_factory.mktemp("build") / "build.log")
            marker.write_text(json.dumps({"run": run, "image": str(image), "seconds": elapsed}))
            print(f"\namd64 image built in {elapsed:.0f} s: {image}")
    work = cache / "amd64" / "work"
    return BuiltImage(image, work / "root", work / "data", work / "boot", elapsed)

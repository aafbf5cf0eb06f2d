"""The image booted with `systemd-nspawn -b`: the running outpost service, under its real unit
and sandbox, rewrites its own configuration (the console's "apply"), which lives on the data
partition behind the /etc/outpost/outpost.toml symlink."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator

import pytest

from gateway.broker.net.security_files import set_password
from tests.image.conftest import REPO, BuiltImage
from tests.image.vm import Container

pytestmark = [pytest.mark.image, pytest.mark.timeout(1200)]

CONFIG_FOLDER = "lib/outpost-etc/outpost"  # under the data tree (mounted on /var)
CONFIG = """gateway_id = "outpost"

[[listeners]]
bind = "127.0.0.1:1883"

[status]
bind = "127.0.0.1:8080"

[console]
enabled = true
password_file = "users"
users = { admin = "admin" }

[uplink]
enabled = true

[[uplink.remotes]]
name = "cloud"
addresses = ["127.0.0.1:9"]  # nothing listens there
"""

# Run by the host's python in the container's network namespace: log in to the console,
# propose a forward rule, apply it (each POST with the session's CSRF token).
CLIENT = """
import re, sys
from tests.outpost.console.support import HttpSession
admin = HttpSession("http://127.0.0.1:8080/")
assert admin.login("admin", "admin-secret") == 200
form = {"filter": "image/#", "remote": "cloud", "qos": "1", "csrf": admin.csrf()}
status, page = admin.request("/console/uplink/forward", form)
change = re.search(r'action="(/console/changes/[^"]+/apply)"', page)
assert status == 200 and change is not None, (status, page)
status, page = admin.request(change.group(1), {"csrf": admin.csrf()})
print(status)
print(page)
"""


@pytest.fixture(scope="module")
def container(amd64_image: BuiltImage, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Container]:
    """The image with the console on, its folder as an older image left it (root:outpost
    0750): the first boot must open it to the service."""
    base = tmp_path_factory.mktemp("nspawn-config")
    for name, source in (("root", amd64_image.root), ("data", amd64_image.data)):
        subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(base / name)], check=True)
    folder = base / "data" / CONFIG_FOLDER
    gid = folder.stat().st_gid
    (folder / "outpost.toml").write_text(CONFIG)
    set_password(folder / "users", "admin", b"admin-secret", iterations=1000)
    for path in (folder / "outpost.toml", folder / "users"):
        os.chown(path, 0, gid)
        path.chmod(0o640)
    folder.chmod(0o750)
    box = Container(base / "root", base / "data", base / "nspawn.log")
    box.start()
    yield box
    box.stop()


def test_the_console_rewrites_the_configuration_on_the_image(container: Container) -> None:
    container.wait_active("outpost.service")
    before = container.run("cat", "/etc/outpost/outpost.toml").stdout
    client = container.run("env", f"PYTHONPATH={REPO}", sys.executable, "-c", CLIENT,
                           namespaces="net", check=False, timeout=90)
    assert client.returncode == 0, client.stderr
    status, _, page = client.stdout.partition("\n")
    assert status == "200" and "applied: add forward rule image/#" in page, client.stdout

    after = container.run("cat", "/etc/outpost/outpost.toml").stdout
    assert tomllib.loads(after)["uplink"]["forward"] == [
        {"filter": "image/#", "remote": "cloud", "qos": 1}]
    history = "/var/lib/outpost/config-history"
    versions = json.loads(container.run("cat", f"{history}/history.json").stdout)
    assert [v["source"] for v in versions["versions"]][-1] == "console:admin", versions
    kept = [container.run("cat", f"{history}/{v['number']:06d}.toml").stdout
            for v in versions["versions"]]
    assert before in kept  # the previous version is in the history
    # Written by the service: group outpost, nothing for others; still a symlink in /etc.
    stat = container.run("stat", "-L", "-c", "%G %a", "/etc/outpost/outpost.toml").stdout.split()
    assert stat[0] == "outpost" and stat[1].endswith("0"), stat
    assert container.run("readlink", "/etc/outpost/outpost.toml").stdout.strip() == \
        "/var/lib/outpost-etc/outpost/outpost.toml"
    assert container.show("outpost.service", "ActiveState")["ActiveState"] == "active"


def test_only_the_configuration_folder_is_writable(container: Container) -> None:
    container.wait_active("outpost.service")
    folder = container.run("stat", "-c", "%G %a", "/var/lib/outpost-etc/outpost").stdout.split()
    assert folder == ["outpost", "2770"]
    pid = container.show("outpost.service", "MainPID")["MainPID"]
    # The service's own mount namespace: its folder writable, the rest of outpost-etc not.
    probe = ("for d in /var/lib/outpost-etc/outpost /var/lib/outpost-etc/ssh /etc/outpost; do "
             "touch $d/.probe 2>&1 && rm -f $d/.probe && echo \"$d writable\"; done; true")
    out = container.run("nsenter", f"--target={pid}", "--mount", "--", "sh", "-c", probe).stdout
    assert "/var/lib/outpost-etc/outpost writable" in out, out
    assert "ssh writable" not in out and "/etc/outpost writable" not in out, out
    score = container.run("systemd-analyze", "security", "--no-pager", "outpost.service",
                          check=False).stdout
    assert "Overall exposure level for outpost.service: " in score, score
    level = float(score.split("Overall exposure level for outpost.service: ")[1].split()[0])
    assert level <= 2.0, score

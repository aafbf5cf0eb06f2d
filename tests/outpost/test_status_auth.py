"""The status endpoint off loopback: refused at config load without authentication; with a
`$7$` password file it asks for HTTP Basic credentials, with a certificate it speaks HTTPS.
Also the uplink password from a file or a systemd credential, and `check-config` warnings
about secrets others can read."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from bridge.uplink.config import RemoteConfig
from gateway.broker.contracts.passwords import hash_password
from outpost.config import ConfigError, parse_config, secret_warnings
from tests.gateway.broker.auth.support import make_pki
from tests.outpost.support import ROOT, http_get, start_outpost


def password_file(path: Path, user: str = "scraper", password: bytes = b"s3cret") -> Path:
    path.write_text(f"{user}:{hash_password(password, iterations=1000)}\n", encoding="utf-8")
    return path


def test_lan_address_without_authentication_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"status": {"bind": "0.0.0.0:8080"}}, "outpost.toml", tmp_path)
    [error] = refused.value.errors
    assert error.startswith("status.bind") and "no authentication" in error
    with pytest.raises(ConfigError) as half:
        parse_config({"status": {"bind": "127.0.0.1:8080", "tls_cert": "c.pem"}},
                     "outpost.toml", tmp_path)
    assert any("no such file" in e or "go together" in e for e in half.value.errors)
    users = password_file(tmp_path / "status.passwd")
    config = parse_config({"status": {"bind": "0.0.0.0:8080", "password_file": str(users)}},
                          "outpost.toml", tmp_path)
    assert config.status.password_file == users
    # disabled, or on loopback: nothing to guard
    parse_config({"status": {"bind": "0.0.0.0:8080", "enabled": False}}, "o.toml", tmp_path)
    bad = tmp_path / "bad.passwd"
    bad.write_text("scraper:plain-text\n", encoding="utf-8")
    with pytest.raises(ConfigError) as unreadable:
        parse_config({"status": {"password_file": str(bad)}}, "outpost.toml", tmp_path)
    assert unreadable.value.errors[0].startswith("status.password_file")


def test_https_and_basic_authentication_on_a_lan_bind(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", clients=())
    users = password_file(tmp_path / "status.passwd")
    outpost = start_outpost(tmp_path / "gw", (
        f'[status]\nbind = "0.0.0.0:0"\npassword_file = "{users}"\n'
        f'tls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n'))
    try:
        assert outpost.status_url is not None and outpost.status_url.startswith("https://")
        port = outpost.status_url.rstrip("/").rsplit(":", 1)[1]
        url = f"https://localhost:{port}/metrics"
        context = ssl.create_default_context(cafile=str(pki.ca))
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                             urllib.request.HTTPSHandler(context=context))

        def get(credentials: bytes | None) -> int:
            request = urllib.request.Request(url)
            if credentials is not None:
                request.add_header("Authorization",
                                   "Basic " + base64.b64encode(credentials).decode())
            try:
                with opener.open(request, timeout=10) as response:
                    return int(response.status)
            except urllib.error.HTTPError as exc:
                return exc.code

        assert get(None) == 401
        assert get(b"scraper:wrong") == 401
        assert get(b"nobody:s3cret") == 401
        assert get(b"scraper:s3cret") == 200
        assert get(b"scraper:s3cret") == 200  # the cached verdict
        with pytest.raises(OSError):  # plain HTTP is not spoken there
            http_get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert "s3cret" not in outpost.log()
    finally:
        assert outpost.stop() == 0


def test_uplink_password_from_a_file_or_a_credential(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "uplink-password"
    secret.write_text("from-file\nignored\n", encoding="utf-8")
    context = {"base_dir": tmp_path}
    remote = RemoteConfig.model_validate(
        {"addresses": ["127.0.0.1:1883"], "password_file": "uplink-password"}, context=context)
    assert remote.read_password() == "from-file"
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "uplink").write_text("from-systemd", encoding="utf-8")
    remote = RemoteConfig.model_validate(
        {"addresses": ["127.0.0.1:1883"], "password_credential": "uplink"}, context=context)
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    with pytest.raises(OSError, match="CREDENTIALS_DIRECTORY is not set"):
        remote.read_password()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credentials))
    assert remote.read_password() == "from-systemd"
    inline = RemoteConfig.model_validate({"addresses": ["h:1"], "password": "hunter2"})
    assert "hunter2" not in repr(inline) and inline.read_password() == "hunter2"
    with pytest.raises(ValueError, match="one way, not password and password_file"):
        RemoteConfig.model_validate({"addresses": ["h:1"], "password": "x",
                                     "password_file": "uplink-password"}, context=context)
    with pytest.raises(ValueError, match="not a credential name"):
        RemoteConfig.model_validate({"addresses": ["h:1"], "password_credential": "../x"})


def test_check_config_warns_about_secrets_others_can_read(tmp_path: Path) -> None:
    config = tmp_path / "outpost.toml"
    config.write_text(
        '[uplink]\nenabled = true\n[[uplink.remotes]]\naddresses = ["127.0.0.1:1883"]\n'
        'password = "hunter2"\n', encoding="utf-8")
    os.chmod(config, 0o644)
    done = subprocess.run([sys.executable, "-m", "outpost", "check-config", str(config)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert "warning: uplink.remotes.0.password: the uplink password is in clear text" in \
        done.stderr and "mode 0644: others can read it" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n", encoding="utf-8")
    os.chmod(secret, 0o640)
    parsed = parse_config({"uplink": {"remotes": [{"addresses": ["h:1"],
                                                   "password_file": "pw"}]}}, "o", tmp_path)
    assert secret_warnings(parsed, config) == [
        f"uplink.remotes.0.password_file: {secret} (mode 0640) can be read by others: chmod 600"]
    os.chmod(secret, 0o600)
    assert secret_warnings(parsed, config) == []


def test_outpost_status_reads_an_https_endpoint_with_a_password(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", clients=())
    users = password_file(tmp_path / "status.passwd")
    section = (f'password_file = "{users}"\n'
               f'tls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n')
    outpost = start_outpost(tmp_path / "gw", f'[status]\nbind = "0.0.0.0:0"\n{section}')
    try:
        assert outpost.status_url is not None
        port = outpost.status_url.rstrip("/").rsplit(":", 1)[1]
        # What the device's own configuration says, with the port the gateway got.
        config = tmp_path / "outpost.toml"
        config.write_text(f'[status]\nbind = "0.0.0.0:{port}"\n{section}', encoding="utf-8")

        def status(*args: str, password: str | None = None
                   ) -> subprocess.CompletedProcess[str]:
            env = {k: v for k, v in os.environ.items() if k != "OUTPOST_STATUS_PASSWORD"}
            if password is not None:
                env["OUTPOST_STATUS_PASSWORD"] = password
            return subprocess.run([sys.executable, "-m", "outpost", "status", *args],
                                  capture_output=True, text=True, timeout=60, cwd=ROOT,
                                  env=env, stdin=subprocess.DEVNULL, check=False)

        anonymous = status("--config", str(config))
        assert anonymous.returncode == 1
        assert "wants a user name and password" in anonymous.stderr
        assert "outpost status --user NAME" in anonymous.stderr
        wrong = status("--config", str(config), "--user", "scraper", password="guess")
        assert wrong.returncode == 1 and "was refused" in wrong.stderr
        # https with the configured certificate pinned (it names localhost, not 127.0.0.1)
        good = status("--config", str(config), "--user", "scraper", "--json", password="s3cret")
        assert good.returncode == 0, good.stderr
        assert "clients" in json.loads(good.stdout)
        # an explicit URL is checked the usual way: the CA and the host name
        url = f"https://localhost:{port}"
        unknown_ca = status("--url", url, "--user", "scraper", password="s3cret")
        assert unknown_ca.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in unknown_ca.stderr
        by_url = status("--url", url, "--ca-file", str(pki.ca), "--user", "scraper",
                        password="s3cret")
        assert by_url.returncode == 0, by_url.stderr
        assert "s3cret" not in outpost.log()
    finally:
        assert outpost.stop() == 0

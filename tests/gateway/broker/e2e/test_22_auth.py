"""22 auth: password files (made by Debian's `mosquitto_passwd` and by `outpost passwd`, which
real mosquitto accepts too), anonymous clients refused off loopback with a plain start-up log,
per-listener settings, and a login brute-force from one address slowed down while a client
from another address keeps working."""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.broker.codec import MQTT_5, ConnAck, Connect
from tests.gateway.broker.auth.support import (
    ROOT,
    SecureBroker,
    broker_pool,
    mosquitto_tool,
    outpost_counter,
    run_tool,
    tcp_client,
)
from tests.gateway.broker.e2e.helpers import wait_for
from tests.support.mosquitto import mosquitto_available, start_mosquitto

ACCEPTED = bytes.fromhex("20020000")
BAD_PASSWORD = bytes.fromhex("20020004")  # 3.1.1 return code 4
NOT_AUTHORIZED = bytes.fromhex("20020005")  # 3.1.1 return code 5
FAST = "[limits]\nlogin_delay = 0.01\n"  # tests with a few failed logins from 127.0.0.1


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[Callable[[str, int], SecureBroker]]:
    with broker_pool(tmp_path) as start:
        yield start


def outpost_passwd(*args: str, input_text: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outpost", "passwd", *args], cwd=ROOT,
                          input=input_text, capture_output=True, text=True, timeout=30,
                          check=False)


@pytest.fixture(scope="module")
def mosquitto_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """alice:secret ($7$, 101 rounds) and bob:builder ($6$), by Debian's mosquitto_passwd."""
    tool = mosquitto_tool("mosquitto_passwd")
    path = tmp_path_factory.mktemp("pw") / "passwd"
    assert run_tool(tool, "-c", "-b", str(path), "alice", "secret").returncode == 0
    assert run_tool(tool, "-H", "sha512", "-b", str(path), "bob", "builder").returncode == 0
    assert "$7$101$" in path.read_text() and "$6$" in path.read_text()
    return path


def test_01_mosquitto_passwd_file_accepted(secure_broker, mosquitto_file):
    broker = secure_broker(f'{FAST}[[listeners]]\nbind = "127.0.0.1:0"\nallow_anonymous = false\n'
                           f'password_file = "{mosquitto_file}"\n', 1)
    address = broker.of("tcp")
    pub = mosquitto_tool("mosquitto_pub")
    base = [pub, "-h", address.host, "-p", str(address.port), "-t", "c22/01", "-m", "x"]
    assert run_tool(*base, "-u", "alice", "-P", "secret").returncode == 0
    assert run_tool(*base, "-u", "bob", "-P", "builder").returncode == 0
    refused = run_tool(*base, "-u", "alice", "-P", "Secret")
    assert refused.returncode != 0 and "bad user name or password" in refused.stderr.lower()
    with tcp_client(address) as c:
        assert c.connect("c22-01", username="nobody", password=b"secret") == BAD_PASSWORD
    with tcp_client(address) as c:
        assert c.connect("c22-01b") == NOT_AUTHORIZED  # anonymous: allow_anonymous = false
    with tcp_client(address, version=MQTT_5) as c:
        connack = c.decode(c.connect("c22-01c", username="bob", password=b"nope"))
        assert isinstance(connack, ConnAck) and connack.reason_code == 0x86
    log = broker.log()
    assert "weak hash" in log and "alice" in log  # mosquitto's 101 rounds are reported


def test_02_outpost_passwd_creates_updates_deletes(tmp_path, secure_broker):
    path = tmp_path / "passwd"
    made = outpost_passwd(str(path), "carol", "--stdin", "--iterations", "2000",
                          input_text="first pw\n")
    assert made.returncode == 0 and "added user 'carol'" in made.stdout
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # prompting twice (getpass falls back to stdin without a terminal)
    changed = outpost_passwd(str(path), "carol", "--iterations", "2000",
                             input_text="second pw\nsecond pw\n")
    assert changed.returncode == 0 and "updated" in changed.stdout
    mismatch = outpost_passwd(str(path), "carol", input_text="one\ntwo\n")
    assert mismatch.returncode == 1 and "do not match" in mismatch.stderr
    assert outpost_passwd(str(path), "dave", "--stdin", input_text="\n").returncode == 1
    assert outpost_passwd(str(path), "dave", "--stdin", "--iterations", "2000",
                          input_text="dave pw\n").returncode == 0
    assert outpost_passwd(str(path), "dave", "-D").returncode == 0
    gone = outpost_passwd(str(path), "dave", "-D")
    assert gone.returncode == 1 and "not in" in gone.stderr
    assert [line.split(":")[0] for line in path.read_text().splitlines()] == ["carol"]
    broker = secure_broker(f'[[listeners]]\nbind = "127.0.0.1:0"\npassword_file = "{path}"\n', 1)
    with tcp_client(broker.of("tcp")) as c:
        assert c.connect("c22-02", username="carol", password=b"second pw") == ACCEPTED
    with tcp_client(broker.of("tcp")) as c:
        assert c.connect("c22-02b", username="carol", password=b"first pw") == BAD_PASSWORD


@pytest.mark.skipif(not mosquitto_available(), reason="mosquitto is not installed")
def test_03_real_mosquitto_reads_outpost_passwd_files(tmp_path):
    path = tmp_path / "passwd"
    # the default (210,000 rounds): what operators get
    assert outpost_passwd(str(path), "erin", "--stdin", input_text="pw of erin\n").returncode == 0
    with start_mosquitto(tmp_path / "mosq", extra_config=(
            "allow_anonymous false", f"password_file {path}")) as mosquitto:
        pub = mosquitto_tool("mosquitto_pub")
        base = [pub, "-h", mosquitto.host, "-p", str(mosquitto.port), "-t", "t", "-m", "m"]
        assert run_tool(*base, "-u", "erin", "-P", "pw of erin").returncode == 0
        assert run_tool(*base, "-u", "erin", "-P", "wrong").returncode != 0


def test_04_anonymous_refused_off_loopback_and_said_so(secure_broker, tmp_path, mosquitto_file):
    broker = secure_broker(
        FAST + '[[listeners]]\nbind = "0.0.0.0:0"\n'  # not loopback: anonymous refused by default
        '[[listeners]]\nbind = "0.0.0.0:0"\nallow_anonymous = true\n'
        f'[[listeners]]\nbind = "0.0.0.0:0"\npassword_file = "{mosquitto_file}"\n'
        '[[listeners]]\nbind = "127.0.0.1:0"\n', 4)
    closed, opened, with_users, local = broker.addresses
    for address in (closed, opened, with_users, local):
        address.host = "127.0.0.1"
    with tcp_client(closed) as c:
        assert c.connect("c22-04a") == NOT_AUTHORIZED
    with tcp_client(closed) as c:  # a username nobody can verify does not help
        assert c.connect("c22-04b", username="admin", password=b"x") == BAD_PASSWORD
    with tcp_client(opened) as c:
        assert c.connect("c22-04c") == ACCEPTED
    with tcp_client(with_users) as c:
        assert c.connect("c22-04d", username="alice", password=b"secret") == ACCEPTED
    with tcp_client(local) as c:
        assert c.connect("c22-04e") == ACCEPTED
    log = broker.log()
    assert "anonymous clients REFUSED (not loopback; allow_anonymous = true would allow them)" \
        in log
    assert "WARNING outpost.listeners: listening on 0.0.0.0:" in log
    assert "anonymous clients ALLOWED on a non-loopback listener" in log
    assert "passwords cross the network in clear text" in log
    assert "anonymous clients allowed (local listener)" in log


def test_05_each_listener_has_its_own_password_file(secure_broker, tmp_path, mosquitto_file):
    other = tmp_path / "other"
    assert outpost_passwd(str(other), "alice", "--stdin", "--iterations", "1000",
                          input_text="different\n").returncode == 0
    broker = secure_broker(
        f'{FAST}[[listeners]]\nname = "plant"\nbind = "127.0.0.1:0"\n'
        f'password_file = "{mosquitto_file}"'
        f'\nallow_anonymous = false\n'
        f'[[listeners]]\nname = "office"\nbind = "127.0.0.1:0"\npassword_file = "{other}"\n'
        'allow_anonymous = false\n', 2)
    plant, office = broker.addresses
    with tcp_client(plant) as c:
        assert c.connect("c22-05a", username="alice", password=b"secret") == ACCEPTED
    with tcp_client(office) as c:
        assert c.connect("c22-05b", username="alice", password=b"secret") == BAD_PASSWORD
    with tcp_client(office) as c:
        assert c.connect("c22-05c", username="alice", password=b"different") == ACCEPTED
    assert "[plant]" in broker.log() and "[office]" in broker.log()


def test_06_bad_password_file_refuses_to_start(tmp_path):
    path = tmp_path / "passwd"
    path.write_text("alice:plaintext\n", encoding="utf-8")
    config = tmp_path / "outpost.toml"
    config.write_text(f'[[listeners]]\nbind = "127.0.0.1:0"\npassword_file = "{path}"\n',
                      encoding="utf-8")
    check = subprocess.run([sys.executable, "-m", "outpost", "check-config", str(config)],
                           cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    assert check.returncode == 2
    assert "listeners.0.password_file" in check.stderr and "line 1" in check.stderr
    run = subprocess.run([sys.executable, "-m", "outpost", "run", "--config", str(config)],
                         cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 2 and "line 1" in run.stderr and "listening" not in run.stdout


def test_07_brute_force_is_slowed_per_source_while_others_work(secure_broker, mosquitto_file):
    broker = secure_broker(
        '[limits]\nlogin_delay = 0.1\nlogin_max_delay = 30\nexempt_sources = []\n'
        f'[[listeners]]\nbind = "127.0.0.1:0"\npassword_file = "{mosquitto_file}"\n'
        'allow_anonymous = false\n'
        '[[listeners]]\nbind = "127.0.0.1:0"\n', 2)  # for reading $SYS
    address, local = broker.addresses
    attacker = "127.0.0.2"
    for attempt in range(6):  # answered after 0, 0.1, 0.2, 0.4, 0.8 and 1.6 s
        with tcp_client(address, source=attacker) as c:
            assert c.connect(f"guess{attempt}", username="alice",
                             password=f"guess{attempt}".encode()) == BAD_PASSWORD
    # The 7th attempt now waits 3.2 s, even with the right password: nothing is learnt early.
    with tcp_client(address, source=attacker) as parked:
        parked.send(Connect("g7", 4, True, 60, "alice", b"secret"))
        # Meanwhile a client from another address logs in and works normally.
        with tcp_client(address, source="127.0.0.3") as other:
            assert other.connect("c22-07", username="bob", password=b"builder") == ACCEPTED
            other.subscribe(("c22/07", 1))
            other.publish("c22/07", b"still here", qos=1)
            [message] = other.receive_publishes(1)
            assert message.payload == b"still here"
        assert parked.buffer == b"" and not parked.is_closed()  # still waiting for its answer
    log = broker.log()
    assert "failed login from 127.0.0.2" in log and "6 failure(s) from there" in log
    assert "CONNECT from 127.0.0.2 waits 3.2 s" in log
    assert "failed login from 127.0.0.3" not in log and "CONNECT from 127.0.0.3" not in log
    wait_for(lambda: outpost_counter(local, "clients/login/failed") == 6, timeout=5)
    assert outpost_counter(local, "clients/login/delayed") >= 6


def test_08_password_checks_waiting_are_bounded_per_source(secure_broker, tmp_path):
    path = tmp_path / "passwd"  # 100,000 rounds: each check takes a while
    assert outpost_passwd(str(path), "frank", "--stdin", "--iterations", "100000",
                          input_text="frank pw\n").returncode == 0
    broker = secure_broker(f'[[listeners]]\nbind = "127.0.0.1:0"\npassword_file = "{path}"\n'
                           '[limits]\nexempt_sources = []\n', 1)
    address = broker.of("tcp")
    guesses = [tcp_client(address, source="127.0.0.5") for _ in range(6)]
    try:
        for n, c in enumerate(guesses):  # all arrive before the first check is done
            c.send(Connect(f"g{n}", 4, True, 60, "frank", f"guess {n}".encode()))
        answers = [c.expect_closed(timeout=10) for c in guesses]
    finally:
        for c in guesses:
            c.close()
    assert answers.count(BAD_PASSWORD) == 4  # at most 4 checks queued from one address
    assert answers.count(b"") == 2  # the rest closed unanswered
    assert "password checks are already waiting" in broker.log()

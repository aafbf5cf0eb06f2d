"""The console against a hostile LAN neighbour, a curious viewer and a careless admin, over
real HTTP against a running `outpost run`: each test is one attack that once got through
(a 500, a broken file, an admin logged out, unbounded work) and is now refused cleanly.

One gateway for the module. Tests that throttle logins or log users out use source addresses
and users of their own, so the others are not slowed or logged out by them."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.base.settings import ConfigError
from gateway.broker.net.security_files import set_password
from outpost.cli import main
from outpost.config import parse_config
from tests.outpost.console.support import HttpSession
from tests.outpost.support import Outpost, closed_by_server, start_outpost
from tests.support.waiting import wait_for

USERS = {"admin": "admin", "viewer": "viewer", "guess": "viewer", "gone": "viewer",
         "changer": "viewer"}
CONFIG = """gateway_id = "attacked"

[status]
bind = "127.0.0.1:0"
password_file = "users"

[console]
enabled = true
password_file = "users"

[console.users]
admin = "admin"
viewer = "viewer"
guess = "viewer"
gone = "viewer"
changer = "viewer"

[uplink]
enabled = true

[[uplink.remotes]]
name = "cloud"
addresses = ["127.0.0.1:9"]

[[uplink.forward]]
filter = "devices/#"

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = 9

[[bridge.devices]]
name = "plc"
bus = "line"
unit_id = 2
address_base = 0
points = [{ name = "temperature", address = 0 }]
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outpost]:
    workdir = tmp_path_factory.mktemp("console-attacks")
    for user in USERS:  # few iterations: the test pays less per login
        set_password(workdir / "users", user, f"{user}-secret".encode(), iterations=1000)
    outpost = start_outpost(workdir, CONFIG)
    yield outpost
    outpost.stop()


def logged_in(gateway: Outpost, user: str = "admin") -> HttpSession:
    session = HttpSession(gateway.url("/"))
    assert session.login(user, f"{user}-secret") == 200
    return session


def error_at(page: str, name: str) -> str:
    """The error shown under the input `name` ("" when none)."""
    found = re.search(rf'data-error-for="{re.escape(name)}">([^<]*)<', page)
    return found.group(1) if found else ""


def check_config(gateway: Outpost) -> int:
    return main(["check-config", str(gateway.config_path)])


# -- 1, 2: a user name that breaks the password file ----------------------------------------


@pytest.mark.parametrize("name", ["evil\rline", "evil\u2028line", "evil\x85line", "#hidden"])
def test_a_name_the_password_file_cannot_hold_is_refused_at_its_field(
        gateway: Outpost, name: str) -> None:
    users = gateway.config_path.parent / "users"
    before = users.read_bytes()
    admin = logged_in(gateway)
    status, page = admin.request("/console/broker/users", {
        "csrf": admin.csrf(), "file": "0", "username": name, "password": "pw"})
    assert status == 200, page[-500:]
    assert error_at(page, "username").startswith("a user name must not"), page[-3000:]
    assert users.read_bytes() == before  # nothing written: the next start still works
    assert check_config(gateway) == 0


# -- 3: parallel guesses ---------------------------------------------------------------------


def test_guesses_sent_at_once_queue_per_address_and_per_user(gateway: Outpost) -> None:
    """An address at the throttle's limit: guesses sent together no longer all get their
    answer after one delay; those that would wait longer than the limit are refused at once
    (429), before any hash, and so is a guess for the same user from another address."""
    answers: list[int] = []

    def guess(source: str) -> None:
        session = HttpSession(gateway.url("/"))
        _, page = session.request("/console/login")
        token = re.search(r'name="login_token" value="([^"]+)"', page)
        assert token is not None
        body = f"login_token={token.group(1)}&username=guess&password=wrong".encode()
        try:
            answers.append(session.raw("POST", "/console/login", body, source=source)[0])
        except OSError:  # a guess still queued when the gateway stops
            answers.append(0)

    threads = [threading.Thread(target=guess, args=("127.0.0.2",), daemon=True)
               for _ in range(8)]
    for thread in threads:
        thread.start()
    # 0, 0.5, 1.5, 3.5 and 7.5 s of waiting for the first five: the others are refused now
    wait_for(lambda: answers.count(429) >= 3, message=f"no guess refused: {answers}")
    other = threading.Thread(target=guess, args=("127.0.0.3",), daemon=True)
    other.start()
    other.join()
    assert answers.count(429) >= 4, answers  # the user's turn is taken, from any address
    assert "too many login attempts" in gateway.log()


# -- 4: logging in often -------------------------------------------------------------------------


def test_a_viewer_logging_in_often_logs_no_admin_out(gateway: Outpost) -> None:
    admin = logged_in(gateway)
    viewers = [logged_in(gateway, "viewer") for _ in range(65)]
    assert "log out" in admin.request("/console/")[1]  # still logged in
    assert "log out" not in viewers[0].request("/console/")[1]  # the viewer's own oldest went
    assert "log out" in viewers[-1].request("/console/")[1]


# -- 5: sessions of a deleted user, or of a changed password ----------------------------------


def test_deleting_a_user_or_changing_a_password_ends_their_sessions(gateway: Outpost) -> None:
    gone, changer = logged_in(gateway, "gone"), logged_in(gateway, "changer")
    admin = logged_in(gateway)
    admin.request("/console/broker/users", {"csrf": admin.csrf(), "file": "0",
                                            "username": "gone", "delete": "1"})
    # (the role's removal waits for its review: it is not needed to log the user out)
    assert "log in" in gone.request("/console/")[1]
    assert "log out" in changer.request("/console/")[1]
    admin.request("/console/broker/users", {"csrf": admin.csrf(), "file": "0",
                                            "username": "changer", "password": "new-secret"})
    assert "log in" in changer.request("/console/")[1]
    assert "log out" in admin.request("/console/")[1]


# -- 6: unbounded work from one form -----------------------------------------------------------


@pytest.mark.parametrize("path", ["/console/devices/new", "/console/devices/probe"])
def test_a_form_with_more_rows_than_a_page_sends_is_refused(gateway: Outpost,
                                                            path: str) -> None:
    admin = logged_in(gateway)
    status, page = admin.request(path, {"csrf": admin.csrf(), "name": "m", "bus": "line",
                                        "points.20000.name": "x"})
    assert status == 400 and "at most 64 point rows" in page
    status, page = admin.request(path, {"csrf": admin.csrf(), "name": "m", "bus": "line",
                                        "points.63.name": "x"})
    assert status == 200 and 'name="points.63.name"' in page


# -- 7, 8: bytes that do not decode --------------------------------------------------------------


def test_invalid_utf8_in_a_form_is_a_400(gateway: Outpost) -> None:
    anonymous = HttpSession(gateway.url("/"))
    status, _, body = anonymous.raw("POST", "/console/login", b"username=\xfe\xff&password=x")
    assert status == 400 and "not valid UTF-8" in body
    admin = logged_in(gateway)
    csrf = admin.csrf().encode()
    status, _, body = admin.raw("POST", "/console/devices/new",
                                b"csrf=" + csrf + b"&name=\xfe\xff")
    assert status == 400 and "not valid UTF-8" in body


def test_undecodable_header_bytes_are_refused_not_crashed_on(gateway: Outpost) -> None:
    anonymous = HttpSession(gateway.url("/"))
    status, _, _ = anonymous.raw("POST", "/console/login", b"login_token=x&username=a",
                                 {"Cookie": b"outpost_login=\xff\xfe"})
    assert status == 403
    admin = logged_in(gateway)
    status, _, _ = admin.raw("POST", "/console/uplink/forward", b"filter=a/%23",
                             {"X-CSRF-Token": b"\xff\xfe"})
    assert status == 403
    status, _, _ = anonymous.raw("GET", "/status", headers={"Authorization": b"Basic \xff\xfe"})
    assert status == 401
    assert "Traceback" not in gateway.log()


# -- 9: path parameters ------------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    "/console/uplink/forward/abc", "/console/uplink/forward/999",
    "/console/uplink/forward/999/remove", "/console/uplink/forward/abc/remove",
    "/console/uplink/forward/%C2%B2", "/console/history/abc/rollback",
    "/console/broker/acl/abc", "/console/broker/acl/0",
])
def test_a_bad_path_parameter_is_a_404(gateway: Outpost, path: str) -> None:
    admin = logged_in(gateway)
    status, _ = admin.request(path, {"csrf": admin.csrf()})
    assert status == 404


# -- 10, 11: numbers, and where their errors are shown ---------------------------------------


@pytest.mark.parametrize(("form", "field"), [
    ({"poll_interval": "1e309"}, "poll_interval"), ({"poll_interval": "inf"}, "poll_interval"),
    ({"points.0.scale": "nan"}, "points.0.scale"), ({"points.0.scale": "1e309"}, "points.0.scale"),
    ({"points.0.deadband": "1e309"}, "points.0.deadband"),
])
def test_a_number_that_is_not_finite_is_refused_at_its_field(gateway: Outpost,
                                                            form: dict[str, str],
                                                            field: str) -> None:
    admin = logged_in(gateway)
    status, page = admin.request("/console/devices/new", {
        "csrf": admin.csrf(), "name": "meter", "bus": "line", "unit_id": "1",
        "address_base": "0", "points.0.name": "p", "points.0.address": "0", **form})
    assert status == 200 and "/console/changes/" not in page  # no review: nothing to apply
    assert "finite" in error_at(page, field), page[-3000:]


def test_a_device_edited_with_a_number_that_is_not_finite_is_refused(gateway: Outpost) -> None:
    admin = logged_in(gateway)
    status, page = admin.request("/console/devices/plc", {
        "csrf": admin.csrf(), "unit_id": "2", "poll_interval": "inf"})
    assert status == 200 and "finite" in error_at(page, "poll_interval"), page[-3000:]


def test_a_hand_written_number_that_is_not_finite_fails_check_config(tmp_path: Path) -> None:
    device = {"name": "plc", "bus": "line", "unit_id": 1, "address_base": 0,
              "poll_interval": float("inf"), "points": [{"name": "p", "address": 0,
                                                        "scale": float("nan")}]}
    with pytest.raises(ConfigError) as caught:
        parse_config({"bridge": {"buses": [{"name": "line", "type": "tcp", "host": "h"}],
                                 "devices": [device]}}, "outpost.toml", tmp_path)
    assert sorted(caught.value.errors) == [
        "bridge.devices.0.points.0.scale: Input should be a finite number",
        "bridge.devices.0.poll_interval: Input should be a finite number"]


@pytest.mark.parametrize(("row", "field", "message"), [
    ({"points.0.address": "70000"}, "points.0.address", "address 70000 cannot exist"),
    ({"points.0.address": "65535", "points.0.type": "float32"}, "points.0.name",
     "runs past register 65535"),  # (a problem of the point that names no key: its row)
    ({"points.0.scale": "0"}, "points.0.scale", "scale must not be 0"),
    # an empty row before it: the error is on the form's row of the point, not on row 1
    ({"points.1.name": "", "points.2.name": "q", "points.2.address": "70000"},
     "points.2.address", "cannot exist"),
])
def test_a_point_problem_is_shown_in_its_row(gateway: Outpost, row: dict[str, str],
                                             field: str, message: str) -> None:
    admin = logged_in(gateway)
    status, page = admin.request("/console/devices/new", {
        "csrf": admin.csrf(), "name": "meter", "bus": "line", "unit_id": "1",
        "address_base": "0", "points.0.name": "p", "points.0.address": "0", **row})
    assert status == 200 and message in error_at(page, field), page[-3000:]


# -- the additions: origin, live streams, security headers, the listener's bounds ------------


def test_a_post_from_another_site_is_refused_whatever_it_carries(gateway: Outpost) -> None:
    admin = logged_in(gateway)
    body = f"csrf={admin.csrf()}&filter=x/%23".encode()
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Referer": "http://evil.example/page"}):
        status, _, text = admin.raw("POST", "/console/uplink/forward", body, headers)
        assert status == 403 and "another site" in text
    own = gateway.url("").rstrip("/")
    status, _, text = admin.raw("POST", "/console/uplink/forward", body, {"Origin": own})
    assert status == 303  # to the change's review


def test_one_login_cannot_hold_every_live_stream(gateway: Outpost) -> None:
    viewer, admin = logged_in(gateway, "viewer"), logged_in(gateway)
    streams = [open_stream(gateway, viewer) for _ in range(4)]
    try:
        assert all(status == 200 for status, _ in streams)
        refused, stream = open_stream(gateway, viewer)
        stream.close()
        assert refused == 503
        status, stream = open_stream(gateway, admin)
        stream.close()
        assert status == 200
    finally:
        for _, held in streams:
            held.close()


def test_a_closed_live_view_frees_its_place_at_once(gateway: Outpost) -> None:
    """A technician going through more device pages in a row than a login may hold live
    views: each page left closes its stream, which no longer counts, although its device
    publishes nothing that would show the stream closed (the keepalive comes after 15 s)."""
    admin = logged_in(gateway)
    for _ in range(4):
        status, stream = open_stream(gateway, admin, "quiet")
        stream.close()
        assert status == 200

    def fifth() -> bool:
        status, stream = open_stream(gateway, admin, "quiet")
        stream.close()
        return status == 200

    wait_for(fifth, 5, interval=0.1, message="the closed live views still count")


def open_stream(gateway: Outpost, session: HttpSession, device: str = ""
                ) -> tuple[int, socket.socket]:
    """GET /console/live (of `device`, else of all) with the session's cookie; (status, the
    open socket)."""
    host, port = gateway.url("").split("//")[1].rstrip("/").split(":")
    sock = socket.create_connection((host, int(port)), timeout=20)
    cookies = "; ".join(f"{c.name}={c.value}" for c in session.jar)
    query = f"?device={device}" if device else ""
    sock.sendall(f"GET /console/live{query} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookies}"
                 f"\r\n\r\n".encode())
    head = b""
    while b"\r\n" not in head:
        head += sock.recv(1024)
    return int(head.split()[1]), sock


@pytest.mark.parametrize("path", ["/console/devices/nowhere", "/console/nowhere", "/nowhere"])
def test_every_answer_carries_the_security_headers(gateway: Outpost, path: str) -> None:
    admin = logged_in(gateway)
    status, headers, _ = admin.raw("GET", path)
    assert status == 404
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Cache-Control"] == "no-store"


def test_one_address_cannot_take_every_connection(gateway: Outpost) -> None:
    host, port = gateway.url("").split("//")[1].rstrip("/").split(":")
    held = []
    try:
        for _ in range(40):  # half-open: connected, nothing sent
            sock = socket.socket()
            sock.bind(("127.0.0.4", 0))
            sock.settimeout(20)
            sock.connect((host, int(port)))
            held.append(sock)
        # beyond the address's 16, closed at once (the others wait for their deadline)
        wait_for(lambda: sum(closed_by_server(sock) for sock in held) >= 40 - 16,
                 message="the connections beyond the cap are still open")
        anonymous = HttpSession(gateway.url("/"))
        assert anonymous.request("/console/login")[0] == 200  # another address is served
    finally:
        for sock in held:
            sock.close()

"""A real HTTPS server on 127.0.0.1 for tests, with a certificate from its own CA.

`serve_https` makes a new CA and a server certificate for `address` (an IP: the name the
client connects to) with openssl, serves `handler` in a thread and yields the port and the
CA file the client must trust.
"""

from __future__ import annotations

import contextlib
import http.server
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Handler = Callable[..., http.server.BaseHTTPRequestHandler]


@contextlib.contextmanager
def serve_https(handler: Handler, work: Path, address: str = "127.0.0.1"
                ) -> Iterator[tuple[int, Path]]:
    """Serve `handler` over HTTPS on 127.0.0.1; yields (port, CA file)."""
    work.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=test CA",
            "-keyout", str(work / "ca.key"), "-out", str(work / "ca.pem"),
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign")
    openssl("req", "-new", *ec, "-subj", f"/CN={address}",
            "-keyout", str(work / "server.key"), "-out", str(work / "server.csr"))
    (work / "ext").write_text(f"subjectAltName=IP:{address}\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", str(work / "server.csr"), "-CA", str(work / "ca.pem"),
            "-CAkey", str(work / "ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", str(work / "ext"), "-out", str(work / "server.pem"))
    httpd: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(work / "server.pem", work / "server.key")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1]), work / "ca.pem"
    finally:
        httpd.shutdown()
        httpd.server_close()


class FlakyFile:
    """A file served with byte ranges over a link that drops: the connection is cut when
    the byte at each offset of `drops` is reached (once per offset), as a cellular link does.
    `sent` counts the body bytes that went out, `requests` the Range headers asked."""

    def __init__(self, path: str, data: bytes, drops: list[int]) -> None:
        self.path = path
        self.data = data
        self.drops = sorted(drops)
        self.sent = 0
        self.requests: list[str | None] = []
        self.lock = threading.Lock()

    def handler(self) -> Handler:
        """The request handler class serving this file."""
        flaky = self

        class _Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != flaky.path:
                    self.send_error(404)
                    return
                asked = self.headers.get("Range")
                flaky.requests.append(asked)
                start = int(asked.removeprefix("bytes=").split("-")[0]) if asked else 0
                size = len(flaky.data)
                if start >= size:
                    self.send_error(416)
                    return
                self.send_response(206 if asked else 200)
                if asked:
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                self.send_header("Content-Length", str(size - start))
                self.send_header("ETag", '"v1"')
                self.end_headers()
                with flaky.lock:
                    cut = next((d for d in flaky.drops if d > start), size)
                    if cut < size:
                        flaky.drops.remove(cut)
                body = flaky.data[start:cut]
                self.wfile.write(body)
                self.wfile.flush()
                flaky.sent += len(body)
                self.close_connection = True  # at `cut`: the link drops mid-body

            def log_message(self, format: str, *args: object) -> None:
                pass

        return _Handler

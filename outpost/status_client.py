"""The client side of the status endpoint: what `outpost status` (and the demo) use to ask a
running gateway for its `/status` document, over HTTP or HTTPS, with HTTP Basic credentials
when the endpoint has a password file.

Trust: with `--url` the server certificate is checked the usual way (a CA file or the system's
store, and the host name). Asked through the configuration on the device itself, the client
trusts exactly the certificate that `[status] tls_cert` names and does not check the host name:
it connects to the address the gateway is bound to, which a certificate rarely names, and the
pinned certificate is a stronger check than a name.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class StatusUnavailableError(Exception):
    """The status endpoint could not be reached, refused us, or answered garbage."""


class CredentialsNeededError(StatusUnavailableError):
    """The endpoint answered 401: it wants a user name and password (or other ones)."""


def pinned_context(certificate: Path) -> ssl.SSLContext:
    """A client context that trusts exactly `certificate` (the gateway's own), any host name."""
    context = ssl.create_default_context(cafile=str(certificate))
    context.check_hostname = False
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the leaf itself is the anchor
    return context


def fetch_status(
    base_url: str,
    timeout: float = 5.0,
    *,
    context: ssl.SSLContext | None = None,
    credentials: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """GET `<base_url>/status` and return the JSON object.

    `context` verifies an https endpoint (default: the system's CA store and the host name);
    `credentials` (user, password) are sent as HTTP Basic.
    """
    url = base_url.rstrip("/") + "/status"
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),  # local: no proxy
        urllib.request.HTTPSHandler(context=context or ssl.create_default_context()),
    )
    request = urllib.request.Request(url)
    if credentials is not None:
        token = base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with opener.open(request, timeout=timeout) as response:
            data = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise CredentialsNeededError(
                f"{url}: the user name or password was refused" if credentials else
                f"{url}: the endpoint wants a user name and password") from None
        raise StatusUnavailableError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise StatusUnavailableError(f"{url}: {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise StatusUnavailableError(f"{url}: {exc}") from None
    if not isinstance(data, dict) or "clients" not in data:
        raise StatusUnavailableError(f"{url}: not an outpost status document")
    return data

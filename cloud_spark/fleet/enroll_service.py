"""`python -m cloud_spark.fleet enroll serve`: the enrollment service on the cloud broker.

How this works: it connects to the cloud broker with its own certificate, subscribes to
`outpost-enroll/request/+` (first contact, with a claim token) and `outpost-enroll/renew/+`
(a device renewing its certificate), and answers each request on
`outpost-enroll/reply/<gateway_id>` with the request's nonce: the signed certificate, or the
reason it was refused. Requests are handled one at a time, in arrival order, off the MQTT
thread; every decision is logged. The registry file (tokens, devices) is the state: the
service can be stopped and started again at any time.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from cloud_spark.fleet.broker import BrokerOptions, CloudSession
from cloud_spark.fleet.enrollment import (
    CertificateAuthority,
    Registry,
    Request,
    decide_enrollment,
    decide_renewal,
    issue,
)

log = logging.getLogger("cloud_spark.fleet.enroll")

REQUESTS = "outpost-enroll/request/+"
RENEWALS = "outpost-enroll/renew/+"
REPLY = "outpost-enroll/reply/{gateway_id}"
MAX_REQUEST_BYTES = 16 * 1024


def answer(registry: Registry, ca: CertificateAuthority, topic: str, payload: bytes
           ) -> tuple[str, dict[str, str]] | None:
    """The reply (topic, body) to one request; None when it cannot be answered at all."""
    kind, _, topic_id = topic.rpartition("/")
    if len(payload) > MAX_REQUEST_BYTES:
        log.warning("%s: %d bytes: ignored", topic, len(payload))
        return None
    try:
        body = json.loads(payload)
    except ValueError:
        log.warning("%s: not JSON: ignored", topic)
        return None
    if not isinstance(body, dict) or not isinstance(body.get("nonce"), str):
        log.warning("%s: no nonce: ignored", topic)
        return None
    request = Request(topic_id, str(body.get("gateway_id", "")), str(body.get("csr", "")),
                      str(body.get("token", "")), body["nonce"])
    renewal = kind.endswith("/renew")
    refusal = (decide_renewal(registry, request) if renewal
               else decide_enrollment(registry, request))
    reply_topic = REPLY.format(gateway_id=topic_id)
    what = "renewal" if renewal else "enrollment"
    if refusal is not None:
        log.warning("%s of %s refused: %s", what, topic_id, refusal)
        return reply_topic, {"nonce": request.nonce, "error": refusal}
    cert = issue(registry, ca, request, renewal)
    log.warning("%s of %s: certificate %x until %s", what, topic_id, cert.serial_number,
                cert.not_valid_after_utc)
    return reply_topic, {"nonce": request.nonce, "certificate": cert.public_bytes(
        serialization.Encoding.PEM).decode()}


def serve(options: BrokerOptions, registry: Registry, ca: CertificateAuthority,
          stop: threading.Event | None = None) -> None:
    """Answer requests until `stop` is set (or forever)."""
    inbox: queue.Queue[tuple[str, bytes]] = queue.Queue()
    stop = stop or threading.Event()
    with CloudSession(options, lambda topic, payload: inbox.put((topic, payload))) as session:
        session.subscribe(REQUESTS, RENEWALS)
        print(f"enrollment service: answering on {options.host}:{options.port}", flush=True)
        while not stop.is_set():
            try:
                topic, payload = inbox.get(timeout=0.5)
            except queue.Empty:
                continue
            reply = answer(registry, ca, topic, payload)
            if reply is not None:
                session.publish(reply[0], json.dumps(reply[1]).encode())


def load(registry_file: Path, ca_cert: Path, ca_key: Path, lifetime: float
         ) -> tuple[Registry, CertificateAuthority]:
    return Registry(registry_file), CertificateAuthority(ca_cert, ca_key, lifetime)

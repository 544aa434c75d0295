"""Certificates: chain, names and usages, renewal, Secrets and caBundle, and a live rotation under requests."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
import time
from pathlib import Path

import requests
from cryptography import x509

from certs import issue_to_files
from tests.conftest import start_server, stop_server
from tests.support.reviews import admission_review


def _served_serial(url: str, ca: str) -> int:
    host, port = url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=ca)
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_live_rotation_drops_no_request(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    tls = tmp_path / "tls"
    try:
        before = _served_serial(server.url, server.ca)
        failures: list[str] = []
        count = 0
        stop = threading.Event()
        body = admission_review({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}})

        def hammer() -> None:
            nonlocal count
            session = requests.Session()
            while not stop.is_set():
                try:
                    # alternate keep-alive and fresh connections, so both see the rotation
                    client = session if count % 2 else requests
                    answer = client.post(server.url + "/validate", json=body, verify=server.ca, timeout=5)
                    if answer.status_code != 200 or answer.json()["response"]["allowed"] is not True:
                        failures.append(answer.text)
                except requests.RequestException as exc:
                    failures.append(repr(exc))
                count += 1

        workers = [threading.Thread(target=hammer) for _ in range(4)]
        for worker in workers:
            worker.start()
        time.sleep(1)
        # a window longer than the serving certificate's life (not the CA's) forces a new serving pair only
        rotated = issue_to_files(tls, names=["localhost", "127.0.0.1"], renew_before=dt.timedelta(days=400))
        assert not rotated.new_ca
        deadline = time.monotonic() + 15
        while _served_serial(server.url, server.ca) != rotated.serving.certificate.serial_number:
            assert time.monotonic() < deadline, "the new certificate was not picked up"
            time.sleep(0.2)
        time.sleep(1)
        stop.set()
        for worker in workers:
            worker.join()
        assert rotated.serving.certificate.serial_number != before
        assert failures == []
        assert count > 50
        assert "Worker exiting" not in server.log.read_text()
    finally:
        stop_server(server)

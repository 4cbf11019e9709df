"""Scraping a metrics page over TCP or a unix socket, and reading samples out of it."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape_tcp(address: str, timeout_s: float = 10.0) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as response:
        assert response.status == 200
        body: bytes = response.read()
    return body.decode()


def scrape_unix(path: str, timeout_s: float = 10.0) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(path)
        sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head[:200]
    return body.decode()


def samples(page: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the page: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(page: str, metric: str, /, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist (yet)."""
    return samples(page).get((metric, tuple(sorted(labels.items()))), 0.0)


def series(page: str) -> int:
    return len(samples(page))

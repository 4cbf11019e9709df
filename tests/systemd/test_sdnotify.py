"""sd_notify without libsystemd: reading the environment, the datagrams sent, and never raising."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.service.sdnotify import (
    STATUS_MAX_CHARS,
    Notifier,
    NotifySettings,
    notify_address,
    notify_settings,
    status_value,
    watchdog_interval_s,
)

PID = 4242


@pytest.mark.parametrize(
    ("value", "address"),
    [
        pytest.param("/run/systemd/notify", "/run/systemd/notify", id="path"),
        pytest.param("@sd-notify/42", b"\0sd-notify/42", id="abstract"),
        pytest.param("@", None, id="abstract-without-name"),
        pytest.param("relative/notify", None, id="relative-path"),
        pytest.param("vsock:2:1234", None, id="vsock-unsupported"),
        pytest.param("", None, id="empty"),
    ],
)
def test_notify_socket_values_map_to_addresses(value: str, address: str | bytes | None) -> None:
    assert notify_address(value) == address


@pytest.mark.parametrize(
    ("usec", "owner", "interval_s"),
    [
        pytest.param("30000000", str(PID), 15.0, id="ours-half-the-period"),
        pytest.param("30000000", None, 15.0, id="no-pid-means-ours"),
        pytest.param("30000000", str(PID + 1), None, id="another-pid-is-not-ours"),
        pytest.param("0", str(PID), None, id="zero-period"),
        pytest.param("-5", str(PID), None, id="negative-period"),
        pytest.param("soon", str(PID), None, id="not-a-number"),
        pytest.param("30000000", "me", None, id="pid-not-a-number"),
        pytest.param(None, str(PID), None, id="no-watchdog"),
    ],
)
def test_the_watchdog_is_ours_only_for_our_pid_and_a_positive_period(
    usec: str | None, owner: str | None, interval_s: float | None
) -> None:
    assert watchdog_interval_s(usec, owner, PID) == interval_s


@pytest.mark.parametrize(
    ("environ", "settings"),
    [
        pytest.param({}, NotifySettings(), id="not-under-systemd"),
        pytest.param(
            {"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(PID)},
            NotifySettings(),
            id="watchdog-without-socket-is-off",
        ),
        pytest.param(
            {"NOTIFY_SOCKET": "@n", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(PID)},
            NotifySettings(address=b"\0n", watchdog_interval_s=0.5),
            id="abstract-with-watchdog",
        ),
    ],
)
def test_settings_come_from_the_environment(environ: dict[str, str], settings: NotifySettings) -> None:
    assert notify_settings(environ, PID) == settings


def test_a_watchdog_pid_mismatch_disables_the_watchdog_and_says_why() -> None:
    settings = notify_settings(
        {"NOTIFY_SOCKET": "/n", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(PID + 1)}, PID
    )
    assert settings.address == "/n"
    assert settings.watchdog_interval_s is None
    assert settings.problem is not None
    assert str(PID + 1) in settings.problem


def test_an_unsupported_notify_socket_disables_notifications_and_says_why() -> None:
    settings = notify_settings({"NOTIFY_SOCKET": "vsock:2:1"}, PID)
    assert settings.address is None
    assert settings.problem is not None
    assert "vsock" in settings.problem


@given(st.text())
def test_a_status_value_is_always_one_bounded_line(text: str) -> None:
    value = status_value(text)
    assert "\n" not in value
    assert "\r" not in value
    assert len(value) <= STATUS_MAX_CHARS


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(5)
    yield sock
    sock.close()


def _fields(sock: socket.socket) -> list[tuple[str, str]]:
    lines = sock.recv(4096).decode().splitlines()
    return [(key, value) for key, _, value in (line.partition("=") for line in lines)]


def test_from_environ_reads_once_and_removes_the_variables(receiver: socket.socket) -> None:
    environ = {
        "NOTIFY_SOCKET": receiver.getsockname(),
        "WATCHDOG_USEC": "2000000",
        "WATCHDOG_PID": str(os.getpid()),
        "PATH": "/usr/bin",
    }
    notifier = Notifier.from_environ(environ)
    assert environ == {"PATH": "/usr/bin"}
    assert notifier.enabled
    assert notifier.watchdog_interval_s == 1.0
    notifier.close()


def test_each_notification_is_one_datagram_of_key_value_lines(receiver: socket.socket) -> None:
    notifier = Notifier(NotifySettings(address=receiver.getsockname(), watchdog_interval_s=1.0))
    notifier.ready("0 queued,\n0 running")
    assert _fields(receiver) == [("READY", "1"), ("STATUS", "0 queued, 0 running")]
    notifier.reloading(monotonic_usec=123)
    assert _fields(receiver) == [("RELOADING", "1"), ("MONOTONIC_USEC", "123")]
    notifier.watchdog()
    assert _fields(receiver) == [("WATCHDOG", "1")]
    notifier.stopping("draining")
    assert _fields(receiver) == [("STOPPING", "1"), ("STATUS", "draining")]
    notifier.close()


def test_reloading_carries_the_monotonic_clock(receiver: socket.socket) -> None:
    notifier = Notifier(NotifySettings(address=receiver.getsockname()))
    notifier.reloading()
    fields = dict(_fields(receiver))
    assert fields["RELOADING"] == "1"
    assert int(fields["MONOTONIC_USEC"]) > 0
    notifier.close()


def test_an_abstract_notify_socket_receives_notifications() -> None:
    name = f"agentd-test-{os.getpid()}-{id(object())}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(5)
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        notifier.status("abstract")
        assert _fields(sock) == [("STATUS", "abstract")]
        notifier.close()


def test_no_watchdog_ping_is_sent_when_the_watchdog_is_not_ours(receiver: socket.socket) -> None:
    notifier = Notifier(NotifySettings(address=receiver.getsockname(), watchdog_interval_s=None))
    notifier.watchdog()
    notifier.status("after")
    assert _fields(receiver) == [("STATUS", "after")]
    notifier.close()


def test_outside_systemd_every_method_is_a_no_op() -> None:
    notifier = Notifier.from_environ({})
    assert not notifier.enabled
    notifier.ready("x")
    notifier.status("x")
    notifier.reloading()
    notifier.watchdog()
    notifier.stopping()
    notifier.close()


def test_a_failing_send_never_raises_and_is_reported_once(tmp_path: Path) -> None:
    reports: list[str] = []
    notifier = Notifier(
        NotifySettings(address=str(tmp_path / "gone"), watchdog_interval_s=1.0), reports.append
    )
    for _ in range(3):
        notifier.ready()
        notifier.watchdog()
    assert len(reports) == 1
    assert "sd_notify failed" in reports[0]
    notifier.close()

"""A headless Chromium driven by selenium, for the dashboard's page tests (tests/web).

Debian's `chromium` and `chromium-driver` (scripts/_test_parts.sh installs them as root): without
them, or without selenium, the tests that need a browser skip, naming the package. The browser's
console is kept (`console`), so a test can require that nothing was refused or thrown.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

try:
    from selenium.common.exceptions import StaleElementReferenceException as Stale
except ImportError:  # without selenium every browser test skips (needs_browser)

    class Stale(Exception):  # type: ignore[no-redef]
        """An element the page replaced (never raised without selenium)."""


REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# Screenshots of the pages the tests drew: test artefacts (docs/web.md's picture is one of them).
ARTEFACTS = Path(os.environ.get("AGENTD_TEST_ARTEFACTS", REPO / "build" / "test-artefacts")) / "web"
WAIT_S = 30.0

T = TypeVar("T")

__all__ = ["Stale", "console", "needs_browser", "open_browser", "screenshot", "wait_for"]


def needs_browser() -> None:
    """Skip, naming the package, when the browser or its driver is missing."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("needs selenium (pip install -e '.[dev]')")
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            pytest.skip(f"needs the Debian package `{package}` (scripts/_test_parts.sh installs it as root)")


@contextmanager
def open_browser() -> Iterator[Any]:
    """One headless Chromium session (a selenium WebDriver), quit at the end."""
    needs_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(check: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    """Poll `check` (a look at the page) until it returns something truthy; bounded."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception as exc:  # an element replaced while we looked at it: look again
            last = exc
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"the page never showed {what} within {timeout_s:g} s (last error: {last!r})")


def console(driver: Any) -> list[dict[str, Any]]:
    """The browser console's entries since the last call."""
    entries: list[dict[str, Any]] = driver.get_log("browser")
    return entries


def screenshot(driver: Any, name: str) -> Path:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path

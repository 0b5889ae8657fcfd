"""Headless Chromium for the browser tests: Debian's ``chromium`` driven through its ``chromedriver`` by Selenium,
with the flags this machine's closed network needs (no background networking, no component updates, no sync) and
a fresh profile directory. ``scripts/test-browser-deps`` installs both; :func:`browser_unavailable` says why a test
cannot have one."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                  "--window-size=1280,1600")


def browser_paths() -> tuple[str | None, str | None]:
    """(chromium, chromedriver) on the PATH, or None for each one missing."""
    return shutil.which("chromium"), shutil.which("chromedriver")


def browser_unavailable() -> tuple[str, bool] | None:
    """None when Chromium and ChromeDriver are here; else (why, whether apt-get could install them: then a test must
    fail, not skip)."""
    chromium, driver = browser_paths()
    if chromium and driver:
        return None
    missing = " and ".join(name for name, path in (("chromium", chromium), ("chromedriver", driver)) if not path)
    if shutil.which("apt-get"):
        return f"{missing} missing: run scripts/test-browser-deps (the README's test command does)", True
    return f"{missing} missing and no apt-get to install Debian's chromium and chromium-driver", False


@contextmanager
def headless_chromium() -> Iterator[WebDriver]:
    """A Selenium driver of headless Chromium with a throwaway profile; quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = browser_paths()
    assert chromium and driver_path, browser_unavailable()
    with tempfile.TemporaryDirectory(prefix="combee-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        try:
            driver.set_page_load_timeout(60)
            yield driver
        finally:
            driver.quit()

"""Debian's headless Chromium, driven through its chromedriver (selenium), for the tests
that look at what a user sees: the dashboard and the report.

Chromium runs with a fresh profile and without background networking (this machine has
no network beyond loopback); selenium is pointed at Debian's binaries so it never tries
to download a browser. ``make test`` installs both packages when missing.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Screenshots for the README are written under docs/ when this is set (they are committed).
DOCS_ENV = "SWEEPER_DOCS_SCREENSHOTS"
DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture
def browser() -> Iterator[object]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("chromium/chromedriver missing (apt-get install chromium chromium-driver)")
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager: never download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="sweeper-chromium-")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-quic",
                "--window-size=1400,1000", f"--user-data-dir={profile}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()  # stops chromium and chromedriver, also when the test failed


def keep_figure(path: Path, name: str) -> None:
    """Copy a figure the test made to docs/ when SWEEPER_DOCS_SCREENSHOTS=1."""
    if os.environ.get(DOCS_ENV) == "1":
        DOCS.mkdir(exist_ok=True)
        (DOCS / name).write_bytes(path.read_bytes())


def keep_screenshot(driver: object, tmp: Path, name: str) -> Path:
    """Save a screenshot under ``tmp`` (and docs/ when SWEEPER_DOCS_SCREENSHOTS=1)."""
    path = tmp / name
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    if os.environ.get(DOCS_ENV) == "1":
        DOCS.mkdir(exist_ok=True)
        (DOCS / name).write_bytes(path.read_bytes())
    return path

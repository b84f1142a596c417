"""Headless Chromium for the HTML report's tests: Debian's chromium + chromium-driver through selenium.

Without any of them the test asking for a browser is skipped with the reason (CI installs them)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1400,1000")


def chromium():
    """A fresh headless Chromium (its own profile): the caller quits it."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            pytest.skip(f"{path} not found: apt-get install {pkg}")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='perfagent-chromium-')}")
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)

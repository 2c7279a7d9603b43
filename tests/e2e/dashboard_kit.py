"""What the dashboard's live tests share: a `dispatch dashboard` started on a free port and read over
HTTP, and headless Chromium (Debian's chromium and chromium-driver, with Selenium; without them a test
skips locally and fails in CI), with the waits and screenshots the browser tests take."""

from __future__ import annotations

import os
import re
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import IN_CI

DOCS = Path(__file__).resolve().parents[2] / "docs"


def shots_dir(tmp_path: Path) -> Path:
    """Where the screenshots go: docs/ when asked (DISPATCH_UPDATE_DOCS=1), else the test's tmp dir."""
    return DOCS if os.environ.get("DISPATCH_UPDATE_DOCS") == "1" else tmp_path


ENV = {"DISPATCH_NODE_TIMEOUT_S": "4"}  # a killed node is reported dead within seconds


def get(url: str, timeout: float = 30):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def start_dashboard(cli, *args) -> str:
    """`dispatch dashboard` on a free port; returns its base URL."""
    cli.start("dashboard", "--port", "0", *args, log_name="dashboard", **ENV)
    log = cli.home / f"dashboard-{len(cli.procs) - 1}.log"
    found = cli.wait_for(lambda: re.search(r"http://[\d.]+:\d+/", log.read_text()), what="the dashboard to listen")
    return found.group(0).rstrip("/")


def browser():
    try:
        from selenium import webdriver
    except ImportError:
        if IN_CI:
            raise
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        if IN_CI:
            raise AssertionError("chromium and chromium-driver are needed (apt-get install chromium chromium-driver)")
        pytest.skip("no chromium / chromedriver on PATH")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1480,1200",
                "--force-device-scale-factor=1", "--hide-scrollbars"):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=driver))


def wait_page(driver, predicate, what: str, timeout: float = 20):
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: predicate(d))
    except Exception:
        raise AssertionError(f"the page never showed {what}; it shows:\n"
                             f"{driver.find_element('tag name', 'body').text[:3000]}") from None


def text_of(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).text


def full_page_screenshot(driver, path: Path) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1480, "height": height, "deviceScaleFactor": 1, "mobile": False})
    time.sleep(0.5)
    driver.save_screenshot(str(path))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

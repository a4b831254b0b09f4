"""The HTML report in a real headless Chromium, opened from disk: no console error, table and charts drawn."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mindspore_doctor.export import html
from test_html import sample_run

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
)


def ensure_chromium() -> None:
    """Install Debian's chromium + chromium-driver when missing (scripts/install_chromium.sh; CI runs as root)."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    subprocess.run(["bash", str(ROOT / "scripts" / "install_chromium.sh")], check=True, timeout=900)


@pytest.fixture
def browser(tmp_path):
    ensure_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.add_argument("--window-size=1280,4200")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)


@pytest.mark.slow
def test_report_renders_in_chromium_without_console_errors(browser, tmp_path):
    from selenium.webdriver.common.by import By

    report, history = sample_run()
    page = html.write_html(report, history, tmp_path / "doctor_report.html")
    browser.get(page.as_uri())

    rows = browser.find_elements(By.CSS_SELECTOR, "#findings-table tbody tr")
    assert [r.find_element(By.CSS_SELECTOR, "a").text for r in rows] == [f.code for f in report.sorted()]
    for chart in ("chart-loss", "chart-grad-heatmap", "chart-update-ratio", "chart-activations"):
        svg = browser.find_element(By.CSS_SELECTOR, f"#{chart} figure svg")
        assert svg.size["width"] > 400 and svg.size["height"] > 100, chart
    assert browser.find_element(By.ID, "diagnosis").is_displayed()
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "html_report.png"))
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


@pytest.mark.slow
def test_a_broken_page_would_be_caught(browser, tmp_path):
    """The console check is live: a page that fails to load a resource shows up as an error."""
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><body><img src="missing.png"></body></html>')
    browser.get(broken.as_uri())
    assert any(entry["level"] == "SEVERE" for entry in browser.get_log("browser"))

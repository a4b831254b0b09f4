"""Regenerate the documentation's screenshots (docs/images/*.png) from a Doctor run.

    mkdir -p /tmp/shots && cd /tmp/shots && /path/to/repo/.venv/bin/msdoctor demo --summary-dir /tmp/shots/runs/demo
    .venv/bin/python scripts/docs_screenshots.py /tmp/shots/runs            # from the repository root
    .venv/bin/python scripts/docs_screenshots.py --tune-report /tmp/tune_example/tune.html   # docs/tune.md's

RUN_BASE_DIR holds the run (a Doctor ``summary_dir`` with TensorBoard on) as a subdirectory, ``--run`` names it
when there are several. TensorBoard (scripts/tensorboard.sh) and MindInsight (scripts/mindinsight.sh) are started
over RUN_BASE_DIR on free loopback ports and stopped at the end; a headless Chromium (the tests' browser setup,
/usr/bin/chromium) photographs, with a 1400x1000 viewport:

* tensorboard-text.png     the findings table on TensorBoard's Text tab
* tensorboard-scalars.png  the Doctor's main series on the Scalars tab
* mindinsight-dashboard.png  MindInsight 2.3.1's training dashboard of the run
* html-report.png          doctor_report.html, opened from disk
* tune-report.png          with --tune-report: the page of ``msdoctor tune --html`` (needs no run, no server)
* tune-plots.png           the same page at its plots: parameter importance, optimisation history
* error-analysis.png       with --analysis: the HTML report's Error analysis section (a run with eval_dataset=)
* html-label-errors.png    with --analysis: the HTML report's Label errors section, thumbnails included
* tensorboard-label-suspects.png  with --analysis: the label suspects' grid on TensorBoard's Images tab

Each page is photographed once its content is drawn (never a loading spinner); an image over 400 KB is reduced to
a 256-colour palette.
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import subprocess
import sys
import time
import urllib.parse
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_html_browser import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS, ensure_chromium  # noqa: E402
from test_mindinsight_server import free_port  # noqa: E402

VIEWPORT = (1400, 1000)
MAX_BYTES = 400_000
SCALAR_TAGS = r"doctor/(loss|grad_norm/global|dead_fraction/.*|findings/error)$"
DEEP_FIND = """
// Every element matching the CSS selector, in the document and in every shadow root below it (Polymer, Angular).
function deepAll(selector, root = document, found = []) {
  for (const el of root.querySelectorAll('*')) {
    if (el.matches(selector)) found.push(el);
    if (el.shadowRoot) deepAll(selector, el.shadowRoot, found);
  }
  return found;
}
"""
TEXT_TABLE = DEEP_FIND + """
// The findings table itself (TensorBoard wraps the whole text in a one-cell table without a head).
return deepAll('table').find(t => t.tHead && t.textContent.includes(arguments[0])) || null;"""
SCROLL_TO_TOP = """
// Scroll the element's nearest scrolling ancestor (across shadow roots) so that the element starts at its top.
const el = arguments[0];
for (let node = el.parentNode; node; node = node.parentNode || node.host) {
  if (node.nodeType === 1 && node.scrollHeight > node.clientHeight + 1
      && ['auto', 'scroll'].includes(getComputedStyle(node).overflowY)) {
    node.scrollTop += el.getBoundingClientRect().top - node.getBoundingClientRect().top - 8;
    return node.tagName;
  }
}
return null;"""
SCALAR_CHARTS = DEEP_FIND + """
// Ready when every chart has drawn its line (a card's path.line appears with its data).
const cards = deepAll('tf-scalar-card');
return cards.length > 0 && cards.every(c => deepAll('path.line', c.shadowRoot || c).length > 0);"""
MINDINSIGHT_CHARTS = """
const canvases = [...document.querySelectorAll('canvas')].filter(c => c.width > 0 && c.height > 0);
const loading = [...document.querySelectorAll('.el-loading-mask')].filter(m => m.offsetParent !== null);
return canvases.length >= 2 && loading.length === 0;"""
HTML_REPORT = "return document.querySelectorAll('#findings-table tbody tr').length > 0 " \
              "&& document.querySelectorAll('figure svg').length > 0;"
TUNE_REPORT = "return document.querySelectorAll('#trials-table tbody tr').length > 0 " \
              "&& document.querySelectorAll('.chart-section svg').length > 0;"


IMAGES_TAB = DEEP_FIND + """
// Ready when the suspects' grid has loaded (an <img> of the Images dashboard with its pixels).
return deepAll('img').some(i => i.complete && i.naturalWidth > 400);"""
ACTUAL_SIZE = DEEP_FIND + """
// Tick the Images dashboard's "Show actual image size" box; true once it is ticked.
const box = deepAll('paper-checkbox, mat-checkbox').find(b => b.textContent.includes('actual image size'));
if (!box) return false;
if (!(box.checked || box.classList.contains('mat-mdc-checkbox-checked'))) box.click();
return true;"""
SECTION_READY = "return document.querySelector(arguments[0]) !== null;"
SECTION_RECT = """
const r = document.querySelector(arguments[0]).getBoundingClientRect();
return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height, document.body.scrollHeight];"""


def run_name(base: Path, wanted: str | None) -> str:
    runs = sorted(p.parent.name for p in base.glob("*/doctor_report.json"))
    if wanted is None and len(runs) == 1:
        return runs[0]
    if wanted in runs:
        return wanted
    raise SystemExit(f"{base}: runs with a doctor_report.json: {runs or 'none'}; name one with --run")


def start_server(script: str, base: Path, stack: ExitStack) -> str:
    port = str(free_port())
    command = ["bash", str(ROOT / "scripts" / script)]
    stack.callback(subprocess.run, [*command, "stop", str(base), port], capture_output=True, timeout=120)
    return subprocess.run([*command, "start", str(base), port], check=True, capture_output=True, text=True,
                          timeout=300).stdout.strip()


def browser(stack: ExitStack) -> Any:
    ensure_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    stack.callback(driver.quit)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False})
    return driver


def wait(driver: Any, what: str, script: str, *args: Any, timeout: float = 90, settle: float = 1.5) -> Any:
    """Poll ``script`` until it answers truthy, then let animations settle."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = driver.execute_script(script, *args)
        if answer:
            time.sleep(settle)
            return answer
        time.sleep(0.5)
    raise SystemExit(f"{what}: the page did not finish drawing in {timeout:.0f}s ({driver.current_url})")


def write_png(png: bytes, path: Path) -> None:
    """Write a screenshot, quantised to 256 colours when it is over ``MAX_BYTES`` (the docs stay small)."""
    if len(png) > MAX_BYTES:
        from PIL import Image

        buffer = io.BytesIO()
        Image.open(io.BytesIO(png)).convert("RGB").quantize(256).save(buffer, "PNG", optimize=True)
        png = buffer.getvalue()
    path.write_bytes(png)
    print(f"{path} ({len(png) // 1024} KB)")


def save(driver: Any, path: Path) -> None:
    write_png(driver.get_screenshot_as_png(), path)


def shoot(driver: Any, out: Path, name: str, url: str, ready: Callable[[], Any]) -> None:
    driver.get(url)
    ready()
    save(driver, out / name)


def shoot_run(driver: Any, base: Path, wanted: str | None, out: Path, stack: ExitStack) -> None:
    """The run's pages: TensorBoard's text and scalars, MindInsight's dashboard, the HTML report."""
    run = run_name(base, wanted)
    report = json.loads((base / run / "doctor_report.json").read_text())
    severe = [f["code"] for f in report["findings"] if f["severity"] in ("error", "warning")]
    code = severe[0] if severe else report["findings"][0]["code"]
    board = start_server("tensorboard.sh", base, stack)
    insight = start_server("mindinsight.sh", base, stack)

    def findings_table() -> None:  # the card scrolls on its own: bring the table's head to its top
        table = wait(driver, "TensorBoard text", TEXT_TABLE, code)
        driver.execute_script(SCROLL_TO_TOP, table)

    shoot(driver, out, "tensorboard-text.png", f"{board}/#text", findings_table)
    driver.execute_script("localStorage.setItem('_ignoreYOutliers', 'false')")  # whole curves, NaN marks too
    tags = urllib.parse.quote(SCALAR_TAGS, safe="")
    shoot(driver, out, "tensorboard-scalars.png", f"{board}/#scalars&tagFilter={tags}&_smoothingWeight=0",
          lambda: wait(driver, "TensorBoard scalars", SCALAR_CHARTS, settle=2))
    shoot(driver, out, "mindinsight-dashboard.png",
          f"{insight}/#/train-manage/training-dashboard?id={urllib.parse.quote('./' + run, safe='')}",
          lambda: wait(driver, "MindInsight dashboard", MINDINSIGHT_CHARTS, settle=3))
    shoot(driver, out, "html-report.png", (base / run / "doctor_report.html").as_uri(),
          lambda: wait(driver, "HTML report", HTML_REPORT))


def save_section(driver: Any, selector: str, path: Path, margin: int = 12) -> None:
    """One section of a page, whole (the viewport grown to the page for the capture), with a margin around it."""
    wait(driver, selector, SECTION_READY, selector, settle=0.5)
    left, top, width, height, page = driver.execute_script(SECTION_RECT, selector)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": VIEWPORT[0], "height": max(VIEWPORT[1], int(page) + 2 * margin), "deviceScaleFactor": 1,
        "mobile": False})
    left, top, width, height, _ = driver.execute_script(SECTION_RECT, selector)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "clip": {
        "x": max(left - margin, 0), "y": max(top - margin, 0), "width": width + 2 * margin,
        "height": height + 2 * margin, "scale": 1}})
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False})
    write_png(base64.b64decode(shot["data"]), path)


def shoot_analysis(driver: Any, base: Path, wanted: str | None, out: Path, stack: ExitStack) -> None:
    """The run's analyses: the HTML report's error analysis and label errors, TensorBoard's suspects grid."""
    run = run_name(base, wanted)
    driver.get((base / run / "doctor_report.html").as_uri())
    save_section(driver, "#error-analysis", out / "error-analysis.png")
    save_section(driver, "#label-errors", out / "html-label-errors.png")
    board = start_server("tensorboard.sh", base, stack)

    def actual_size() -> None:  # "Show actual image size": the grid's captions legible
        wait(driver, "TensorBoard images", IMAGES_TAB, settle=0.5)
        wait(driver, "TensorBoard images", ACTUAL_SIZE)
        wait(driver, "TensorBoard images", IMAGES_TAB, settle=2)

    shoot(driver, out, "tensorboard-label-suspects.png", f"{board}/#images", actual_size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, nargs="?", help="run base dir (the parent of the Doctor's summary_dir)")
    parser.add_argument("--run", help="the run's directory name under BASE (default: the only one)")
    parser.add_argument("--tune-report", type=Path, metavar="HTML", help="photograph this msdoctor tune --html page")
    parser.add_argument("--analysis", action="store_true", help="photograph the run's analyses (error analysis, "
                        "label errors: HTML and TensorBoard) instead of its dashboards")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    args = parser.parse_args(argv)
    if args.base is None and args.tune_report is None:
        parser.error("give BASE, --tune-report or both")
    args.out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        driver = browser(stack)
        if args.base is not None:
            photograph = shoot_analysis if args.analysis else shoot_run
            photograph(driver, args.base.resolve(), args.run, args.out, stack)
        if args.tune_report is not None:
            shoot(driver, args.out, "tune-report.png", args.tune_report.resolve().as_uri(),
                  lambda: wait(driver, "tune report", TUNE_REPORT))
            driver.execute_script("document.getElementById('chart-importance').scrollIntoView()")
            save(driver, args.out / "tune-plots.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

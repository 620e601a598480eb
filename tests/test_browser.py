"""The course in a real browser: JupyterLab, started by `make lab`, in headless Chromium driven
by Playwright (Debian's chromium package; no browser is downloaded). A stored notebook shows
its figures and no broken widget with nothing fetched from the network; run top to bottom it
shows no error; changing the attention explorer's head redraws its figure. Screenshots are kept in
build/browser/ (the path is printed; failed.png shows the page when the test failed)."""

import json
import re
import shutil
import time
import urllib.request

import pytest
from lab import ROOT, TOKEN, running_lab

# The notebook under test: chapter 08, with the trained dates model's attention explorer.
TARGET = "notebooks/08_decoding.ipynb"
SCREENSHOTS = ROOT / "build" / "browser"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Offline: no host but this machine's resolves.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium to test in a real browser: apt-get install chromium")

PROMPTS = "[...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent)"
RUNNING = f"() => {PROMPTS}.some(p => p.includes('*'))"  # a queued or running cell shows [*]
DONE = f"() => {PROMPTS}.every(p => /\\[\\d+\\]/.test(p))"
ERRORS = """() => [...document.querySelectorAll('.jp-OutputArea-output')]
    .filter(o => o.dataset.mimeType === 'application/vnd.jupyter.stderr'
                 || /Traceback|Error displaying widget|Loading widget/.test(o.textContent))
    .map(o => o.textContent.slice(0, 300))"""


def wait_for_kernel(page, base, timeout=120):
    """Until the notebook's kernel has started and is idle (the page's own indicator says
    "idle" before the kernel exists too). Waits with the page's clock: a time.sleep would
    hold up Playwright's event loop, and with it the page."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sessions = json.load(urllib.request.urlopen(f"{base}/api/sessions?token={TOKEN}"))
        if sessions and all(s["kernel"]["execution_state"] == "idle" for s in sessions):
            return
        page.wait_for_timeout(250)
    raise TimeoutError(f"the kernel did not start in {timeout} s: {sessions}")


def first_image(page):
    return page.evaluate("() => document.querySelector('.jp-OutputArea-output img')?.src")


# The figure of the explorer: the image in the output of the cell whose controls it is.
EXPLORER_IMAGE = """() => document.querySelector('.widget-toggle-button')?.closest('.jp-Cell')
    ?.querySelector('.jp-OutputArea-output img')?.src"""


def open_run_and_change(page, base, cells):
    """The stored notebook, then Run All, then another head in the explorer."""
    page.goto(f"{base}/lab/tree/{TARGET}?reset&token={TOKEN}")
    page.wait_for_function(f"() => document.querySelectorAll('.jp-Notebook .jp-Cell').length == {cells}")
    wait_for_kernel(page, base)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status=idle]")

    # as stored: the figures show, no widget placeholder, no frozen progress bar
    text = page.inner_text(".jp-Notebook")
    assert first_image(page), "the stored figures do not show"
    assert page.evaluate(ERRORS) == []
    assert not re.search(r"\b0%\|", text), "a progress bar is stored at 0%"
    page.screenshot(path=SCREENSHOTS / "1_stored.png")

    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    page.wait_for_function(RUNNING, timeout=10_000)
    # Notebook 08 runs in under a minute on an idle 2-core CPU, in minutes on a busy one.
    page.wait_for_function(DONE, timeout=420_000)
    page.wait_for_selector(".widget-toggle-button")
    assert page.evaluate(ERRORS) == [], "a cell shows an error"
    before = page.evaluate(EXPLORER_IMAGE)
    assert before, "the explorer shows no figure"
    page.locator(".widget-toggle-button", has_text="1").first.click()
    page.wait_for_function(f"(before) => ({EXPLORER_IMAGE})() !== before", arg=before,
                           timeout=30_000)
    assert page.evaluate(ERRORS) == []
    page.locator(".widget-toggle-button", has_text="1").first.scroll_into_view_if_needed()
    page.screenshot(path=SCREENSHOTS / "2_head_changed.png")


def test_a_notebook_renders_offline_runs_and_its_widgets_respond(tmp_path, capsys):
    sync_api = pytest.importorskip("playwright.sync_api")
    notebook = ROOT / TARGET
    stored = notebook.read_bytes()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with running_lab(tmp_path) as base, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        outside = []  # what the page asked of anything but this JupyterLab (refused: ARGS)
        page.on("request", lambda r: r.url.startswith((base, "data:", "blob:")) or outside.append(r.url))
        page.set_default_timeout(60_000)
        try:
            open_run_and_change(page, base, len(json.loads(stored)["cells"]))
        except Exception:
            page.screenshot(path=SCREENSHOTS / "failed.png")
            raise
        browser.close()
    assert outside == [], f"fetched from outside: {outside}"
    assert notebook.read_bytes() == stored, f"{TARGET} was written by the browser session"
    with capsys.disabled():
        print(f"\n  browser test: {time.perf_counter() - start:.0f} s, screenshots in "
              f"{SCREENSHOTS.relative_to(ROOT)}/")


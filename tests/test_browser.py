"""The course in a real browser: JupyterLab, started by `make lab`, in headless Chromium driven
by Playwright (Debian's chromium package; no browser is downloaded). `make lab` opens the start
page with the file browser at the course's folder and offers the course's kernel only; a
terminal opened from the Launcher's tile, wherever the file browser is, runs the course's check
command. Each stored notebook of chapters 01, 02, 04, 05, 06 and 08 shows every figure it holds
and no broken widget and no error, with nothing fetched from the network; a copy of notebook 08
run top to bottom shows no error, every control of its attention explorer redraws the figure
(at one height for every layer), and saved, closed and reopened after its kernel is gone, it
shows its progress bar's last line and the explorer's figure, and no widget error; notebooks 04
and 06 run top to bottom, and each control of their explorers (04: the FFN's layer, sequence,
token; 06: the trained model's example, typed date, attention, head, token) redraws its figure.
One JupyterLab and one browser serve every test. Screenshots are kept in build/browser/ (the path is
printed; failed.png shows the page when a test failed): each links and FFN figure as the stored
notebook shows it."""

import json
import re
import shutil
import time
import urllib.request

import pytest
from lab import ROOT, TOKEN, running_lab

# The notebook that is run: chapter 08, with the trained dates model's attention explorer; a
# copy of it (next to it, so that it runs as it would) is run, saved and reopened.
TARGET = "notebooks/08_decoding.ipynb"
COPY = "notebooks/browser_test_08_decoding.ipynb"
# The notebooks opened as stored (not run): the chapters with links and FFN figures.
STORED = ["01_attention", "02_multi_head_attention", "04_feed_forward_and_norm", "05_encoder",
          "06_decoder", "08_decoding", "09_variants"]
# A cell that draws attention as links or the FFN from the inside.
VISUAL = re.compile(r"\b(draw_links|draw_heads|draw_ffn|draw_ffn_weights|draw_units|draw_embedding_space|"
                    r"draw_groups|draw_journey|FFNExplorer|ReadingExplorer\.\w+)\(")
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
# Every output image, and whether the browser has decoded it into pixels.
IMAGES = """() => [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output img')]
    .map(img => img.complete && img.naturalWidth > 0)"""
# The figure of the explorer: the image in the output of the cell whose controls it is.
EXPLORER_IMAGE = """() => document.querySelector('.widget-toggle-button')?.closest('.jp-Cell')
    ?.querySelector('.jp-OutputArea-output img')?.src"""
EXPLORER_HEIGHT = """() => document.querySelector('.widget-toggle-button')?.closest('.jp-Cell')
    ?.querySelector('.jp-OutputArea-output img')?.naturalHeight"""
# Each of the explorer's dropdowns: its widest option's text (in the select's font) fits it.
DROPDOWNS_FIT = """() => [...document.querySelectorAll('.widget-dropdown select')].map(select => {
    const context = document.createElement('canvas').getContext('2d');
    context.font = getComputedStyle(select).font;
    const widest = Math.max(...[...select.options].map(o => context.measureText(o.text).width));
    return [select.value, select.clientWidth, Math.ceil(widest)];
})"""
# The vertical middle of each label of the explorer's second row.
LABEL_MIDDLES = """() => Object.fromEntries([...document.querySelectorAll('.widget-label')]
    .filter(l => ['attention', 'head', 'token'].includes(l.textContent.trim()))
    .map(l => [l.textContent.trim(), l.getBoundingClientRect()])
    .map(([name, r]) => [name, (r.top + r.bottom) / 2]))"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab (`make lab`) for every test of this module: its base URL."""
    with running_lab(tmp_path_factory.mktemp("lab")) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(lab, browser, request):
    """A fresh page on the module's JupyterLab; afterwards: nothing was fetched from outside
    it. A failed test leaves failed.png."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    outside = []  # what the page asked of anything but this JupyterLab (refused: ARGS)
    page.on("request", lambda r: r.url.startswith((lab, "data:", "blob:")) or outside.append(r.url))
    page.set_default_timeout(60_000)
    failed = request.session.testsfailed
    yield page
    if request.session.testsfailed > failed:
        page.screenshot(path=SCREENSHOTS / "failed.png")
    page.close()
    assert outside == [], f"fetched from outside: {outside}"


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


def open_stored(page, base, path, cells):
    """Open a notebook as stored and wait until every cell is on the page."""
    page.goto(f"{base}/lab/tree/{path}?reset&token={TOKEN}")
    page.wait_for_function(f"() => document.querySelectorAll('.jp-Notebook .jp-Cell').length == {cells}")


def image_outputs(cell):
    return sum("image/png" in output.get("data", {}) for output in cell.get("outputs", []))


@pytest.mark.parametrize("name", STORED)
def test_a_stored_notebook_renders_offline(name, lab, page):
    """As stored, without running: every stored figure shows (as many decoded images as the
    notebook holds image outputs), no widget placeholder, no error, no progress bar frozen at
    0%; a screenshot of each links and FFN figure."""
    notebook = ROOT / "notebooks" / f"{name}.ipynb"
    stored = notebook.read_bytes()
    cells = json.loads(stored)["cells"]
    open_stored(page, lab, f"notebooks/{name}.ipynb", len(cells))
    expected = sum(image_outputs(c) for c in cells)
    page.wait_for_function(f"() => ({IMAGES})().filter(Boolean).length >= {expected}",
                           timeout=30_000)
    shown = page.evaluate(IMAGES)
    assert len(shown) == expected and all(shown), (
        f"{name}: {sum(shown)} of {expected} stored figures show ({len(shown)} images on the page)")
    assert page.evaluate(ERRORS) == [], f"{name}: an output shows an error or a broken widget"
    assert not re.search(r"\b0%\|", page.inner_text(".jp-Notebook")), f"{name}: a progress bar at 0%"
    visual = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and image_outputs(c)
              and VISUAL.search("".join(c["source"]))]
    assert visual, f"{name} has no links or FFN figure"
    for i in visual:
        images = page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".jp-OutputArea-output img")
        for k in range(images.count()):
            images.nth(k).scroll_into_view_if_needed()
            images.nth(k).screenshot(path=SCREENSHOTS / f"{name}_cell{i}_{k}.png")
    assert notebook.read_bytes() == stored, f"{name} was written by the browser session"


def terminal_text(page):
    return page.inner_text(".jp-Terminal:visible .xterm-accessibility-tree")


def test_a_launcher_terminal_runs_the_check_command(lab, page):
    """The start page (`make lab`'s own address) opens with the file browser at the course's
    folder (exercises/ in view); the Launcher offers the course's kernel only; its Terminal
    tile, opened while the file browser shows notebooks/, gives a shell in the course's folder,
    where the check command runs the checks."""
    page.goto(f"{lab}/?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    listing = page.locator(".jp-DirListing-itemName")
    listing.filter(has_text="exercises").wait_for()
    assert {"exercises", "notebooks"} <= set(listing.all_inner_texts())
    listing.filter(has_text="notebooks").dblclick()
    page.locator(".jp-BreadCrumbs", has_text="notebooks").wait_for()
    page.click(".jp-FileBrowser [data-command='launcher:create']")
    cards = page.locator(".jp-Launcher-section:visible .jp-LauncherCard")
    cards.filter(has_text="Terminal").wait_for()
    labels = cards.all_inner_texts()  # a notebook's and a console's kernels, then the others
    assert labels[:2] == ["Python (tfcourse)"] * 2 and "Python 3 (ipykernel)" not in labels, labels
    cards.filter(has_text="Terminal").click()
    page.locator(".jp-Terminal:visible .xterm-accessibility-tree").wait_for(state="attached")
    page.wait_for_function("() => document.querySelector('.jp-Terminal:not(.lm-mod-hidden) "
                           ".xterm-accessibility-tree').textContent.includes(\"course's folder\")")
    page.locator(".jp-Terminal:visible .xterm-screen").click()
    page.keyboard.type("pytest exercises/test_ex01_attention.py\n")
    page.wait_for_function("() => /\\d+ (failed|passed)|rror/.test(document.querySelector("
                           "'.jp-Terminal:not(.lm-mod-hidden) .xterm-accessibility-tree').textContent)",
                           timeout=120_000)
    text = terminal_text(page)
    page.screenshot(path=SCREENSHOTS / "0_launcher_terminal.png")
    assert "not found" not in text and "No such file" not in text, text[-1500:]
    assert "test_ex01_attention.py" in text and "Not implemented yet" in text, text[-1500:]


@pytest.fixture
def copy_of_08():
    """A copy of notebook 08 beside it (removed afterwards, with its checkpoint)."""
    copy = ROOT / COPY
    shutil.copyfile(ROOT / TARGET, copy)
    yield copy
    copy.unlink(missing_ok=True)
    (copy.parent / ".ipynb_checkpoints" / f"{copy.stem}-checkpoint.ipynb").unlink(missing_ok=True)


def change_explorer(page, action, what):
    """Do `action` to the explorer; its figure is redrawn, and nothing shows an error."""
    before = page.evaluate(EXPLORER_IMAGE)
    action()
    page.wait_for_function(f"(before) => ({EXPLORER_IMAGE})() !== before", arg=before,
                           timeout=30_000)
    assert page.evaluate(ERRORS) == [], f"{what}: an output shows an error"


def test_notebook_08_runs_its_explorer_responds_and_saved_it_reopens_clean(lab, page, copy_of_08, capsys):
    """A copy of notebook 08: Run All shows no error; every control of the explorer redraws
    its figure (at one height for every layer), its dropdowns show their whole labels and its
    labels are in line; a typed input with an unknown character says so, and one of 200
    characters is refused with the limit. Saved, its kernel shut down, and opened again, it
    shows the progress bar's last line and the explorer's figure, and no widget error."""
    stored = (ROOT / TARGET).read_bytes()
    start = time.perf_counter()
    open_stored(page, lab, COPY, len(json.loads(stored)["cells"]))
    wait_for_kernel(page, lab)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status=idle]")
    page.screenshot(path=SCREENSHOTS / "1_stored.png")

    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    page.wait_for_function(RUNNING, timeout=10_000)
    # Notebook 08 runs in under a minute on an idle 2-core CPU, in minutes on a busy one.
    page.wait_for_function(DONE, timeout=420_000)
    page.wait_for_selector(".widget-toggle-button")
    assert page.evaluate(ERRORS) == [], "a cell shows an error"
    assert page.evaluate(EXPLORER_IMAGE), "the explorer shows no figure"
    run = time.perf_counter() - start

    controls = page.locator(".jp-Cell", has=page.locator(".widget-toggle-button"))
    controls.scroll_into_view_if_needed()
    dropdown = controls.locator(".widget-dropdown select")  # example, layer, token
    heights = {page.evaluate(EXPLORER_HEIGHT)}
    change_explorer(page, lambda: controls.locator(".widget-toggle-button", has_text="1").click(), "head 1")
    for layer in (0, 3):  # the encoder's self-attention, the decoder's masked one
        change_explorer(page, lambda i=layer: dropdown.nth(1).select_option(index=i), f"layer {layer}")
        heights.add(page.evaluate(EXPLORER_HEIGHT))
    assert len(heights) == 1, f"the figure's height changes from layer to layer: {heights}"
    for value, width, widest in page.evaluate(DROPDOWNS_FIT):
        assert width >= widest + 16, f"a dropdown cuts off {value!r}: {widest} px of text in {width} px"
    middles = page.evaluate(LABEL_MIDDLES)
    assert max(middles.values()) - min(middles.values()) <= 2, f"labels out of line: {middles}"
    page.screenshot(path=SCREENSHOTS / "2_explorer_layer.png")
    change_explorer(page, lambda: dropdown.nth(2).select_option(index=2), "token")
    change_explorer(page, lambda: dropdown.nth(0).select_option(index=1), "example")
    typed = controls.locator(".widget-text input")
    change_explorer(page, lambda: (typed.fill("Nov 21, 2026 ★"), typed.press("Enter")), "typed")
    status = controls.locator(".widget-html")
    assert "'★' is unknown to the model" in status.inner_text()
    page.screenshot(path=SCREENSHOTS / "3_explorer_typed.png")
    typed.fill("1" * 200)
    typed.press("Enter")
    page.wait_for_function("(s) => s.textContent.includes('up to')", arg=status.element_handle())
    assert "200 characters" in status.inner_text()

    page.click(".lm-MenuBar-itemLabel:text-is('File')")
    page.click(".lm-Menu-itemLabel:text-is('Save Notebook')")
    page.wait_for_function("() => !document.querySelector('.jp-mod-current .jp-mod-dirty')")
    deadline = time.monotonic() + 30
    while copy_of_08.read_bytes() == stored:
        assert time.monotonic() < deadline, "the notebook was not saved"
        page.wait_for_timeout(250)
    for session in json.load(urllib.request.urlopen(f"{lab}/api/sessions?token={TOKEN}")):
        urllib.request.urlopen(urllib.request.Request(
            f"{lab}/api/sessions/{session['id']}?token={TOKEN}", method="DELETE"))

    saved = json.loads(copy_of_08.read_bytes())
    open_stored(page, lab, COPY, len(saved["cells"]))
    expected = sum(image_outputs(c) for c in saved["cells"])
    page.wait_for_function(f"() => ({IMAGES})().filter(Boolean).length >= {expected}",
                           timeout=30_000)
    page.wait_for_timeout(2000)  # time for a widget to fail to show
    assert page.evaluate(ERRORS) == [], "the reopened notebook shows an error or a broken widget"
    text = page.text_content(".jp-Notebook")  # off-screen cells too
    assert re.search(r"reverse: 100%\|█+\| 120/120", text), "no progress bar's last line"
    assert "[Attention explorer: choose" in text
    explorer = page.locator(".jp-CodeCell", has=page.get_by_text("[Attention explorer: choose"))
    explorer.scroll_into_view_if_needed()
    page.wait_for_timeout(1000)  # drawn once in view
    explorer.screenshot(path=SCREENSHOTS / "4_reopened_explorer.png")
    assert "application/vnd.jupyter.widget-view+json" not in json.dumps(saved)
    assert "widgets" not in saved["metadata"]
    assert (ROOT / TARGET).read_bytes() == stored, f"{TARGET} was written by the browser session"
    with capsys.disabled():
        print(f"\n  browser test, notebook 08 run: {run:.0f} s, all: {time.perf_counter() - start:.0f} s, "
              f"screenshots in {SCREENSHOTS.relative_to(ROOT)}/")


def run_all(page, lab, path):
    """Open a stored notebook, run every cell, wait until all have run; no error shown."""
    open_stored(page, lab, path, len(json.loads((ROOT / path).read_bytes())["cells"]))
    wait_for_kernel(page, lab)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status=idle]")
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    page.wait_for_function(RUNNING, timeout=10_000)
    page.wait_for_function(DONE, timeout=420_000)
    assert page.evaluate(ERRORS) == [], f"{path}: a cell shows an error"


def drive_explorer(page, lab, path, changes, prefix):
    """Run the notebook at `path`, then make each change of changes(cell) in turn in its
    explorer's cell (changes: a list of such functions when the notebook has several
    explorers, one for each, in order): the figure is redrawn and no error shows; a
    screenshot after each. The notebook's file is not written. Returns the explorers' cells."""
    stored = (ROOT / path).read_bytes()
    run_all(page, lab, path)
    page.wait_for_selector(".widget-toggle-button")
    cells = page.locator(".jp-Cell", has=page.locator(".widget-toggle-button"))
    for n, explorer_changes in enumerate(changes if isinstance(changes, list) else [changes]):
        explorer_prefix = f"{prefix}{n}" if isinstance(changes, list) else prefix
        change_each(page, cells.nth(n), explorer_changes, explorer_prefix)
    assert (ROOT / path).read_bytes() == stored, f"{path} was written by the browser session"
    return cells


def change_each(page, cell, changes, prefix):
    """Each change of changes(cell) in turn: the cell's figure is redrawn, no error shows."""
    image = cell.locator(".jp-OutputArea-output img")
    for name, change in changes(cell):
        before = image.get_attribute("src")
        change()
        page.wait_for_function("([cell, before]) => cell.querySelector('.jp-OutputArea-output img')"
                               "?.src !== before", arg=[cell.element_handle(), before], timeout=30_000)
        assert page.evaluate(ERRORS) == [], f"changing the {name} shows an error"
        assert "Error" not in cell.locator(".widget-html").inner_text(), f"the {name}: an error line"
        image.scroll_into_view_if_needed()
        page.screenshot(path=SCREENSHOTS / f"{prefix}_{name.replace(' ', '_')}.png")


def test_notebook_04_runs_and_every_control_of_its_ffn_explorer_redraws(lab, page):
    """Notebook 04: Run All shows no error; the FFN explorer's layer, sequence and token each
    redraw its figure."""
    def changes(cell):
        select = cell.locator(".widget-dropdown select")
        return [("layer", lambda: select.nth(0).select_option("0")),
                ("sequence", lambda: select.nth(1).select_option("1")),
                ("token", lambda: cell.locator(".widget-toggle-button").nth(3).click())]

    drive_explorer(page, lab, "notebooks/04_feed_forward_and_norm.ipynb", changes, "04_ffn_explorer")


def test_notebook_06_runs_and_every_control_of_its_attention_explorer_redraws(lab, page):
    """Notebook 06: Run All shows no error; the trained model's attention explorer redraws
    for another example, a typed date, each attention (layer), a head and a token."""
    def changes(cell):
        select, text = cell.locator(".widget-dropdown select"), cell.locator(".widget-text input")
        return [("example", lambda: select.nth(0).select_option(index=1)),
                ("typed date", lambda: (text.fill("Jan 3, 1999"), text.press("Enter"))),
                ("attention", lambda: select.nth(1).select_option(index=3)),
                ("head", lambda: cell.locator(".widget-toggle-button").nth(0).click()),
                ("token", lambda: select.nth(2).select_option(index=3))]

    drive_explorer(page, lab, "notebooks/06_decoder.ipynb", changes, "06_attention_explorer")


def test_notebook_09_runs_and_every_control_of_its_three_explorers_redraws(lab, page):
    """Notebook 09: Run All shows no error; the classifier's, the language model's and the
    masked language model's explorers each redraw for another example, a typed text, the
    layer, a head and a token; a typed unknown character is named, and an over-long text
    is refused with the limit."""
    def controls(typed):
        def changes(cell):
            select, text = cell.locator(".widget-dropdown select"), cell.locator(".widget-text input")
            return [("example", lambda: select.nth(0).select_option(index=1)),
                    ("typed text", lambda: (text.fill(typed), text.press("Enter"))),
                    ("layer", lambda: select.nth(1).select_option(index=1)),
                    ("head", lambda: cell.locator(".widget-toggle-button").nth(2).click()),
                    ("token", lambda: select.nth(2).select_option(index=3))]
        return changes

    cells = drive_explorer(page, lab, "notebooks/09_variants.ipynb",
                           [controls("Sommerzeit 日"), controls("for i in range(10):"),
                            controls("Sommer_eit")], "09_reading_explorer")
    classifier = cells.nth(0)
    status = classifier.locator(".widget-html")
    assert "'日' is unknown to the model" in status.inner_text()
    typed = classifier.locator(".widget-text input")
    typed.fill("x" * 41)
    typed.press("Enter")
    page.wait_for_function("(s) => s.textContent.includes('up to')", arg=status.element_handle())
    assert "41 characters" in status.inner_text() and "up to 40" in status.inner_text()

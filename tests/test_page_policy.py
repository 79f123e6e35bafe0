"""The second wall in the page (issue 32): the Content-Security-Policy that `sandbox-kernel install --page-policy`
puts on the Jupyter server's pages, in a real JupyterLab in Chromium.

Two servers: one with the policy installed by the real command, one without. Each offers the sandbox kernel, the
same kernel with its output cleaning switched off (SANDBOX_KERNEL_TEST_NO_CLEANING=1 in its kernelspec's
environment: tests only) and ipykernel. Under the policy JupyterLab works (notebook, cells, PNG, HTML tables,
Markdown and math, widgets) with no policy violation of its own; with the cleaning off, the hostile outputs the
other browser tests use run no script and reach no other host, so the policy holds alone; without the policy
the same uncleaned outputs do run and fetch (the detection works); and under the policy ipykernel's raw HTML and
JavaScript run nothing either (what the policy costs).
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, expect

from conftest import Listener
from sandbox_kernel.jupyter.kernelspec import kernel_json
from sandbox_kernel.jupyter.page_policy import policy
from sandbox_kernel.protocol.dispatcher import NO_CLEANING_NOTICE, TEST_NO_CLEANING
from test_jupyterlab import (
    ARTIFACTS,
    CELL_MS,
    CHROMIUM,
    KERNEL,
    LIVE_IN_JUPYTERLAB,
    UI_MS,
    Lab,
    active_payloads,
    chromium,
    hit_paths,
    open_notebook,
    run_cell,
    served_lab,
    show_cell,
    url_payloads,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"Chromium not found at {CHROMIUM}"),
]

BIN = Path(sys.executable).parent
UNCLEANED = "Python 3 (Pyodide sandbox, output NOT cleaned: test)"
IPYKERNEL = "Python 3 (ipykernel)"
# What the page records of the policy's refusals (an init script runs before the page's own and outside its policy).
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(
  {directive: e.effectiveDirective, blocked: e.blockedURI, sample: e.sample, source: e.sourceFile}));
"""


def uncleaned_kernelspec(data_dir: Path) -> None:
    """The sandbox kernel with the test switch on, as a kernelspec of its own (its environment holds the switch)."""
    folder = data_dir / "kernels" / "pyodide-sandbox-uncleaned"
    folder.mkdir(parents=True)
    spec = {**kernel_json(), "display_name": UNCLEANED, "env": {TEST_NO_CLEANING: "1"}}
    (folder / "kernel.json").write_text(json.dumps(spec))


def lab_env(tmp: Path) -> dict[str, str]:
    """Where the server's kernelspecs are (besides this venv's), with the uncleaned one among them."""
    data = tmp / "data"
    uncleaned_kernelspec(data)
    return {"JUPYTER_DATA_DIR": str(data)}


@pytest.fixture(scope="module")
def walled_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A JupyterLab whose config folder got the page policy from `sandbox-kernel install --page-policy`."""
    tmp = tmp_path_factory.mktemp("walled-lab")
    env = lab_env(tmp)
    installed = subprocess.run(
        [str(BIN / "sandbox-kernel"), "install", "--user", "--no-fetch", "--page-policy"],
        env={**os.environ, **env, "JUPYTER_CONFIG_DIR": str(tmp / "config")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr
    assert (tmp / "config" / "jupyter_server_config.d" / "sandbox_kernel_page_policy.json").is_file()
    with served_lab(tmp, env) as lab:
        yield lab


@pytest.fixture(scope="module")
def open_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The same JupyterLab without the page policy (the control)."""
    tmp = tmp_path_factory.mktemp("open-lab")
    with served_lab(tmp, lab_env(tmp)) as lab:
        yield lab


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    with chromium(tmp_path_factory.mktemp("chromium-profile"), RECORD_VIOLATIONS) as context:
        yield context


@dataclass
class Watched:
    """A tab, and the policy refusals its console reported."""

    page: Page
    console: list[str] = field(default_factory=list)

    def refusals(self) -> list[str]:
        return [text for text in self.console if "Content Security Policy" in text]

    def violations(self) -> list[dict[str, str]]:
        """The securitypolicyviolation events of the current document."""
        return self.page.evaluate("window.__violations || []")


@pytest.fixture
def tab(browser: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Watched]:
    """A new tab; if the test fails, a screenshot of it goes to tests/artifacts/<test>-failed.png."""
    ARTIFACTS.mkdir(exist_ok=True)
    failed_before = request.session.testsfailed
    watched = Watched(browser.new_page())
    watched.page.on("console", lambda message: watched.console.append(f"{message.type}: {message.text}"))
    yield watched
    if request.session.testsfailed > failed_before:
        watched.page.screenshot(path=ARTIFACTS / f"{request.node.name}-failed.png")
    watched.page.close()


def header(lab: Lab, path: str) -> str:
    """The Content-Security-Policy header of one of the server's answers."""
    request = urllib.request.Request(lab.url + path, headers={"Authorization": f"token {lab.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers.get("Content-Security-Policy", "")


def png(width: int, height: int) -> bytes:
    """A red PNG image."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def test_every_page_of_the_server_carries_the_policy_and_jupyter_servers_own_additions(walled_lab: Lab) -> None:
    """/lab, /tree, /view/ and /api/ carry the policy; /files/ adds jupyter_server's `sandbox allow-scripts` (its
    scripts run in an origin of their own), the API its `default-src 'none'`."""
    (walled_lab.root / "page.html").write_text("<p>hello</p>")
    assert header(walled_lab, "/lab") == policy()
    assert header(walled_lab, "/view/page.html") == policy()
    assert header(walled_lab, "/files/page.html") == policy() + "; sandbox allow-scripts"
    assert header(walled_lab, "/api/contents") == policy() + "; default-src 'none'"


def test_jupyterlab_works_under_the_policy(walled_lab: Lab, tab: Watched) -> None:
    """A notebook opens, cells run, a PNG, an HTML table, Markdown with math and a widget render and the widget
    answers a drag; Lab's own token script (allowed by its hash) runs; nothing of Lab's is refused."""
    page = tab.page
    response = page.goto(walled_lab.page_url())
    assert response is not None and response.headers["content-security-policy"] == policy()
    open_notebook(page, walled_lab, KERNEL)
    assert "token=" not in page.url, "JupyterLab's inline script (allowed by its hash) did not take the token out"
    image = base64.b64encode(png(40, 30)).decode()
    cell = run_cell(
        page,
        "import base64; from IPython.display import HTML, Image, Markdown, display; import ipywidgets as w\n"
        f"display(Image(data=base64.b64decode('{image}')))\n"
        'display(HTML(\'<table class="dataframe"><tr><th>fruit</th><td class="price">3</td></tr></table>\'))\n'
        "display(Markdown('**bold** and $x^2$'))\n"
        "s = w.IntSlider(max=100); display(s)\n"
        "print('all shown')",
    )
    expect(cell.locator(".jp-OutputArea-output").filter(has_text="all shown")).to_have_count(1, timeout=CELL_MS)
    shown = cell.locator(".jp-RenderedImage img")
    expect(shown).to_have_count(1)
    page.wait_for_function("img => img.complete && img.naturalWidth === 40", arg=shown.element_handle())
    expect(cell.locator(".jp-RenderedHTML table.dataframe td.price")).to_have_text("3")
    expect(cell.locator(".jp-RenderedMarkdown strong")).to_have_text("bold")
    expect(cell.locator(".jp-RenderedMarkdown mjx-container")).to_have_count(1, timeout=CELL_MS)
    slider = cell.locator(".widget-slider .noUi-target")
    expect(slider).to_be_visible(timeout=CELL_MS)
    handle, box = cell.locator(".noUi-handle"), slider.bounding_box()
    grip = handle.bounding_box()
    assert box is not None and grip is not None
    page.mouse.move(grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, grip["y"] + grip["height"] / 2, steps=10)
    page.mouse.up()
    expect(cell.locator(".widget-readout")).not_to_have_text("0", timeout=UI_MS)
    readout = cell.locator(".widget-readout").inner_text()
    expect(page.locator(".jp-Notebook-ExecutionIndicator").first).to_have_attribute("data-status", "idle")
    result = run_cell(page, "s.value")
    expect(result.locator(".jp-OutputArea-executeResult .jp-OutputArea-output")).to_have_text(readout, timeout=CELL_MS)
    page.screenshot(path=ARTIFACTS / "jupyterlab-page-policy.png")
    assert tab.violations() == [] and tab.refusals() == [], (tab.violations(), tab.refusals())


def hostile_cell(port: int, widget_html: bool = True) -> str:
    """Every active and URL payload of test_jupyterlab.py, and a widget's HTML with a handler, in one cell."""
    hit = f"http://127.0.0.1:{port}"
    widget = (
        'import ipywidgets as w; display(w.HTML(\'<b class="sbx-w">widget html</b>'
        f'<img src=x onerror="document.body.dataset.pwned = 1; fetch(&quot;{hit}/widget&quot;)">\'))'
    )
    return "\n".join([active_payloads(port), show_cell(url_payloads(port)), *([widget] if widget_html else [])])


def wait_until_shown(page: Page, cell: Locator, widget_html: bool = True) -> None:
    """The hostile cell has rendered (its last outputs are there) and every image in it has loaded or failed."""
    expect(cell.locator("b.sbx-far-done")).to_have_text("all shown", timeout=CELL_MS)
    if widget_html:
        expect(cell.locator("b.sbx-w")).to_have_text("widget html", timeout=CELL_MS)
    page.wait_for_function(
        "area => [...area.querySelectorAll('img')].every(img => img.complete)",
        arg=cell.locator(".jp-Cell-outputArea").element_handle(),
        timeout=CELL_MS,
    )


def test_with_the_cleaning_off_the_policy_alone_stops_every_payload(walled_lab: Lab, tab: Watched) -> None:
    page = tab.page
    listener = Listener()
    try:
        open_notebook(page, walled_lab, UNCLEANED)
        cell = run_cell(page, hostile_cell(listener.port))
        wait_until_shown(page, cell)
        # The cleaning was off: the kernel said so, and the payloads reached the page as the guest wrote them.
        expect(cell.locator(".jp-OutputArea-output").filter(has_text=NO_CLEANING_NOTICE.strip())).to_have_count(1)
        area = cell.locator(".jp-Cell-outputArea")
        assert area.locator("img[onerror]").count() >= 2 and area.locator("a[href^='javascript:']").count() == 1
        assert area.locator("script").count() >= 1
        area.locator("a.sbx-link").click()  # a javascript: URL
        # (Not clicked: the link to the listener. A policy does not stop a navigation the user clicks; only the
        # cleaning, which takes such an href away, does. It is there, uncleaned.)
        assert cell.locator("a.sbx-far-link").get_attribute("href") == f"/\\127.0.0.1:{listener.port}/html-link"
        assert page.evaluate("document.body.dataset.pwned") is None, "a payload ran a script"
        listener.assert_untouched()
        # The browser reports the policy's refusals: inline scripts, handlers, and images from the listener.
        directives = {v["directive"] for v in tab.violations()}
        assert {"script-src-elem", "script-src-attr", "img-src"} <= directives, tab.violations()
        page.screenshot(path=ARTIFACTS / "jupyterlab-page-policy-alone.png")
    finally:
        listener.close()


def test_without_the_policy_the_same_uncleaned_payloads_run_and_fetch(open_lab: Lab, tab: Watched) -> None:
    """The control: the detection above would see a script that ran and a fetch that left."""
    page = tab.page
    listener = Listener()
    try:
        open_notebook(page, open_lab, UNCLEANED)
        cell = run_cell(page, hostile_cell(listener.port))
        wait_until_shown(page, cell)
        expect(page.locator("body")).to_have_attribute("data-pwned", re.compile("."), timeout=CELL_MS)
        cell.locator("a.sbx-far-link").click()
        wanted = {"/javascript", "/script", "/onerror", "/remote-image", "/widget"} | LIVE_IN_JUPYTERLAB
        deadline = time.monotonic() + 20
        while not wanted <= hit_paths(listener) and time.monotonic() < deadline:
            page.wait_for_timeout(200)
        assert wanted <= hit_paths(listener), sorted(wanted - hit_paths(listener))
    finally:
        listener.close()


def test_under_the_policy_ipykernel_outputs_run_nothing_either(walled_lab: Lab, tab: Watched) -> None:
    """The cost: the policy is the server's, so a plain ipykernel's raw HTML and JavaScript are stopped too."""
    page = tab.page
    listener = Listener()
    try:
        open_notebook(page, walled_lab, IPYKERNEL)
        cell = run_cell(page, hostile_cell(listener.port, widget_html=False))  # (ipywidgets is not in this venv)
        wait_until_shown(page, cell, widget_html=False)
        assert cell.locator(".jp-Cell-outputArea script").count() >= 1  # ipykernel's output is not cleaned
        cell.locator("a.sbx-link").click()
        assert page.evaluate("document.body.dataset.pwned") is None, "a payload ran a script"
        listener.assert_untouched()
        assert {"script-src-elem", "img-src"} <= {v["directive"] for v in tab.violations()}
    finally:
        listener.close()

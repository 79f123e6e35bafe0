"""Comms and ipywidgets through a real kernel: widgets open, stay in sync both ways, and their state is checked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient, KernelManager

from conftest import execute, once_running, start_kernel, stop_kernel, value

CORE = "@jupyter-widgets/controls"


@pytest.fixture(scope="module")
def widgets() -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    km, kc = start_kernel(["--SandboxKernel.packages=['tqdm==4.70.1']"])
    yield km, kc
    stop_kernel(km, kc)


def opened(run: Any, model: str) -> list[dict[str, Any]]:
    """The comm_open contents of a run for widgets of one model name."""
    return [c for c in run.of_type("comm_open") if c["data"]["state"].get("_model_name") == model]


def send_comm(
    kc: BlockingKernelClient, msg_type: str, content: dict[str, Any], timeout: float = 60, metadata: dict | None = None
) -> list[dict]:
    """Send a frontend comm message; the IOPub messages it caused, until the kernel is idle again."""
    msg = kc.session.msg(msg_type, content, metadata=metadata)
    kc.shell_channel.send(msg)
    caused = []
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
            continue
        if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
            return caused
        if reply["msg_type"] != "status":
            caused.append(reply)


def test_a_slider_round_trip(widgets):
    """comm_open from the guest, a comm_msg from the client changes the guest's value, the observer's output
    arrives, and the guest's echo confirms the value."""
    _, kc = widgets
    run = execute(kc, "import ipywidgets as w\ns = w.IntSlider(description='n')\n"
                  "s.observe(lambda ch: print('changed to', ch['new']), 'value')\ns")  # fmt: skip
    slider = opened(run, "IntSliderModel")
    assert slider and slider[0]["target_name"] == "jupyter.widget"
    view = run.of_type("execute_result")[0]["data"]["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == slider[0]["comm_id"]
    update = {"method": "update", "state": {"value": 7}, "buffer_paths": []}
    caused = send_comm(kc, "comm_msg", {"comm_id": view["model_id"], "data": update})
    assert "changed to 7\n" in [m["content"].get("text") for m in caused if m["msg_type"] == "stream"]
    echoes = [m["content"]["data"] for m in caused if m["msg_type"] == "comm_msg"]
    assert {"method": "echo_update", "state": {"value": 7}, "buffer_paths": []} in echoes
    assert value(execute(kc, "s.value")) == "7"
    # The guest changes it: the frontend hears of it.
    run = execute(kc, "s.value = 3")
    assert [c["data"]["state"] for c in run.of_type("comm_msg")] == [{"value": 3}]


def test_comm_info_lists_the_open_widgets_of_a_target(widgets):
    _, kc = widgets
    run = execute(kc, "import ipywidgets as w\nb = w.Button(description='go')\nb")
    button = opened(run, "ButtonModel")[0]["comm_id"]
    comms = kc.comm_info(target_name="jupyter.widget", reply=True)["content"]["comms"]
    assert comms[button] == {"target_name": "jupyter.widget"}
    execute(kc, "b.close()")
    assert button not in kc.comm_info(reply=True)["content"]["comms"]


def test_a_button_click_runs_its_handler(widgets):
    _, kc = widgets
    run = execute(
        kc, "import ipywidgets as w\nclicks = []\nb2 = w.Button()\nb2.on_click(lambda b: clicks.append(1))\nb2"
    )
    button = opened(run, "ButtonModel")[0]["comm_id"]
    send_comm(kc, "comm_msg", {"comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}})
    assert value(execute(kc, "len(clicks)")) == "1"


def test_interact_reruns_the_function_into_its_output_widget(widgets):
    _, kc = widgets
    run = execute(kc, "from ipywidgets import interact\ninteract(lambda x: print('x is', x), x=5);")
    slider = opened(run, "IntSliderModel")[0]["comm_id"]
    assert "x is 5\n" in run.stream()
    caused = send_comm(
        kc, "comm_msg", {"comm_id": slider, "data": {"method": "update", "state": {"value": 9}, "buffer_paths": []}}
    )
    printed = [m for m in caused if m["msg_type"] == "stream"]
    assert [m["content"]["text"] for m in printed] == ["x is 9\n"]
    # The Output widget captures by the request's msg_id: the guest knows which request it served.
    states = [m["content"]["data"]["state"] for m in caused if m["msg_type"] == "comm_msg"]
    assert {"msg_id": printed[0]["parent_header"]["msg_id"]} in states


def test_an_html_widget_with_a_script_is_cleaned(widgets):
    _, kc = widgets
    run = execute(
        kc,
        "import ipywidgets as w\n"
        "h = w.HTML('<b>bold</b><script>alert(1)</script><img src=x onerror=alert(2)>')\n"
        "c = w.Checkbox(description='<img src=https://evil.example/a.png>caption', description_allow_html=True)\n"
        "display(h, c)",
    )
    html = opened(run, "HTMLModel")[0]["data"]["state"]["value"]
    assert "<b>bold</b>" in html and "script" not in html and "onerror" not in html
    description = opened(run, "CheckboxModel")[0]["data"]["state"]["description"]
    assert "caption" in description and "evil.example" not in description
    # A later update is cleaned as well.
    run = execute(kc, 'h.value = \'<a href="https://evil.example/" onclick="x()">go</a>\'')
    [update] = [c["data"]["state"]["value"] for c in run.of_type("comm_msg")]
    assert ">go</a>" in update and "evil.example" not in update and "onclick" not in update


def test_widgets_of_other_modules_and_targets_do_not_reach_the_browser(widgets):
    _, kc = widgets
    run = execute(
        kc,
        "import ipywidgets as w, comm\n"
        "from traitlets import Unicode\n"
        "class Evil(w.DOMWidget):\n"
        "    _model_module = Unicode('evil-widgets').tag(sync=True)\n"
        "    _view_module = Unicode('evil-widgets').tag(sync=True)\n"
        "e = Evil()\n"
        "c = comm.create_comm(target_name='bokeh.comm', data={'x': 1})",
    )
    assert run.content["status"] == "ok"
    modules = [
        c["data"]["state"]["_model_module"] for c in run.of_type("comm_open") if c["target_name"] == "jupyter.widget"
    ]
    assert "@jupyter-widgets/base" in modules  # Evil's layout is a core model: it goes
    assert "evil-widgets" not in modules
    assert not [c for c in run.of_type("comm_open") if c["target_name"] == "bokeh.comm"]
    notices = run.stream("stderr")
    assert "widget module 'evil-widgets' is not allowed" in notices and "SandboxKernel.widget_modules" in notices


def test_tqdm_auto_draws_a_widget_bar_that_finishes(widgets):
    _, kc = widgets
    run = execute(kc, "from tqdm.auto import tqdm\nfor i in tqdm(range(40)): pass")
    assert run.content["status"] == "ok"
    assert run.stream("stderr") == ""  # no IProgress or monitor-thread warnings
    progress = opened(run, "FloatProgressModel")
    assert progress, "tqdm.auto drew no widget bar"
    updates = [c["data"]["state"] for c in run.of_type("comm_msg") if c["comm_id"] == progress[0]["comm_id"]]
    assert {"value": 40.0} in updates and {"bar_style": "success"} in updates
    texts = [c["data"]["state"].get("value") for c in run.of_type("comm_msg")]
    assert any(isinstance(t, str) and "40/40" in t for t in texts)


def test_a_comm_message_during_a_running_cell_is_served_after_it(widgets):
    """ipykernel hands comm messages over while a cell runs; the one sandbox serves them once the cell ends."""
    _, kc = widgets
    run = execute(kc, "import ipywidgets as w\nlate = w.IntSlider()\nlate")
    slider = opened(run, "IntSliderModel")[0]["comm_id"]
    update = {"method": "update", "state": {"value": 4}, "buffer_paths": []}

    hook = once_running(lambda: kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": slider, "data": update})))
    cell = execute(kc, "import time\nprint('busy', flush=True)\ntime.sleep(1)\nlate.value", on_output=hook)
    assert value(cell) == "0"  # the cell ran to its end first
    assert value(execute(kc, "late.value")) == "4"  # asked at once: the comm message still came first


def test_the_kernel_offers_no_subshells(widgets):
    """JupyterLab's widget manager would send comm messages on a subshell, which ipykernel serves on another
    thread and event loop; the one sandbox serves one request at a time, on the kernel's loop."""
    _, kc = widgets
    features = kc.kernel_info(reply=True)["content"].get("supported_features", [])
    assert "kernel subshells" not in features


def test_request_states_gets_every_live_widget_in_ipywidgets_format_cleaned(widgets):
    """What JupyterLab asks after a page reload (the control comm's request_states): ipywidgets' own reply, each
    widget's state under states[id]['state'] and one buffer_paths list, reaches the frontend, cleaned."""
    _, kc = widgets
    run = execute(
        kc,
        "import ipywidgets as w\nrs = w.IntSlider(value=42)\n"
        "rh = w.HTML('<b>kept</b><img src=x onerror=alert(1)>')\nri = w.Image(value=b'PNG', format='png')\n"
        "display(rs, rh, ri)",
    )
    ids = {name: opened(run, name)[0]["comm_id"] for name in ("IntSliderModel", "HTMLModel", "ImageModel")}
    control = {"comm_id": "control-1", "target_name": "jupyter.widget.control", "data": {}}
    send_comm(kc, "comm_open", control, metadata={"version": "1.0.0"})
    caused = send_comm(kc, "comm_msg", {"comm_id": "control-1", "data": {"method": "request_states"}})
    [reply] = [m for m in caused if m["msg_type"] == "comm_msg"]
    data = reply["content"]["data"]
    assert data["method"] == "update_states", reply
    states = data["states"]
    assert states[ids["IntSliderModel"]]["state"]["value"] == 42
    assert states[ids["HTMLModel"]]["model_name"] == "HTMLModel"
    assert states[ids["HTMLModel"]]["state"]["value"] == '<b>kept</b><img src="x">'
    image_paths = [path for path in data["buffer_paths"] if path[0] == ids["ImageModel"]]
    assert image_paths == [[ids["ImageModel"], "state", "value"]]
    assert reply["buffers"][data["buffer_paths"].index(image_paths[0])] == b"PNG"
    assert len(reply["buffers"]) == len(data["buffer_paths"])

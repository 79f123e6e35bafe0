"""The widget guard's rules, on comm messages as the sandbox could send them (no kernel needed)."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox_kernel.jupyter.sanitize import OutputSanitizer
from sandbox_kernel.jupyter.widget_guard import CommRefused, WidgetGuard, decoded_buffers


def guard(**kwargs: Any) -> WidgetGuard:
    return WidgetGuard(OutputSanitizer(image_hosts=["img.example"]), **kwargs)


def open_widget(g: WidgetGuard, comm_id: str, name: str, module: str = "@jupyter-widgets/controls", **state: Any):
    content = {
        "comm_id": comm_id,
        "target_name": "jupyter.widget",
        "data": {"state": {"_model_name": name, "_model_module": module, **state}, "buffer_paths": []},
    }
    return g.from_guest("comm_open", content, [])["data"]["state"]


def update(g: WidgetGuard, comm_id: str, buffers: list[bytes] | None = None, paths=None, **state: Any):
    data = {"method": "update", "state": state, "buffer_paths": paths or []}
    return g.from_guest("comm_msg", {"comm_id": comm_id, "data": data}, buffers or [])["data"]["state"]


def test_only_widget_targets_open():
    with pytest.raises(CommRefused, match=r"comm target 'bokeh\.comm' is not one the sandbox may open"):
        guard().from_guest("comm_open", {"comm_id": "a", "target_name": "bokeh.comm", "data": {}}, [])


def test_only_allowed_modules_and_the_setting_adds_one():
    with pytest.raises(CommRefused, match=r"widget module 'bqplot' is not allowed.*SandboxKernel\.widget_modules"):
        open_widget(guard(), "a", "FigureModel", "bqplot")
    assert open_widget(guard(extra_modules=frozenset({"bqplot"})), "a", "FigureModel", "bqplot")
    g = guard()
    open_widget(g, "b", "IntSliderModel")
    with pytest.raises(CommRefused, match="'evil' is not allowed"):
        update(g, "b", _model_module="evil")  # a model may not move to another module later either


def test_html_values_are_cleaned_and_other_text_is_made_inert():
    g = guard()
    state = open_widget(g, "h", "HTMLModel", value="<b>x</b><script>alert(1)</script>", description="\\href{u}{y}")
    assert state["value"] == "<b>x</b>"
    assert "\\href" not in state["description"]
    assert update(g, "h", value="<img src=https://evil.example/p.png>")["value"] == "<img>"


def test_a_text_input_keeps_what_the_user_typed():
    g = guard()
    assert open_widget(g, "t", "TextareaModel", value="\\href{a}{b}")["value"] == "\\href{a}{b}"


def test_description_turned_into_html_later_is_cleaned_then():
    g = guard()
    assert open_widget(g, "c", "CheckboxModel", description="<img src=https://evil.example/>hi")["description"]
    # Flipping description_allow_html alone would render the old text as HTML: the kernel sends it cleaned.
    state = update(g, "c", description_allow_html=True)
    assert state["description"] == "<img>hi"
    assert update(g, "c", description="<i>ok</i><script>x</script>")["description"] == "<i>ok</i>"


def test_layout_and_style_values_that_fetch_are_left_out():
    g = guard()
    state = open_widget(
        g, "s", "HTMLStyleModel", "@jupyter-widgets/controls",
        background="URL(https://evil.example/x)", text_color="red", font_size="\\75rl(x)",
    )  # fmt: skip
    assert state["text_color"] == "red" and "background" not in state and "font_size" not in state


def test_media_by_url_must_be_allowed():
    g = guard()
    open_widget(g, "i", "ImageModel", format="png")
    with pytest.raises(CommRefused, match="format became 'url' without a new value"):
        update(g, "i", format="url")
    with pytest.raises(CommRefused, match=r"evil\.example.*allow_net"):
        update(g, "i", [b"https://evil.example/x.png"], [["value"]], format="url", value=None)
    assert update(g, "i", [b"https://img.example/x.png"], [["value"]], format="url", value=None) == {
        "format": "url",
        "value": None,
    }


def test_output_widget_outputs_are_cleaned_as_outputs():
    g = guard()
    outputs = [
        {"output_type": "display_data", "data": {"text/html": "<p>a</p><script>b</script>"}, "metadata": {}},
        {"output_type": "display_data", "data": {"application/javascript": "alert(1)"}, "metadata": {}},
        {"output_type": "stream", "name": "stdout", "text": "hi"},
        {"output_type": "evil"},
    ]
    state = open_widget(g, "o", "OutputModel", "@jupyter-widgets/output", outputs=outputs)
    assert state["outputs"] == [
        {"output_type": "display_data", "data": {"text/html": "<p>a</p>"}, "metadata": {}},
        {"output_type": "display_data", "data": {}, "metadata": {}},
        {"output_type": "stream", "name": "stdout", "text": "hi"},
    ]


def test_the_control_comms_states_are_judged_by_their_models():
    g = guard()
    open_widget(g, "h", "HTMLModel", value="")
    g.from_frontend("comm_open", {"comm_id": "ctl", "target_name": "jupyter.widget.control"})
    data = {
        "method": "update_states",
        "states": {"h": {"_model_name": "HTMLModel", "_model_module": "@jupyter-widgets/controls",
                         "value": "<script>x</script>ok"}, "unknown": {"value": 1}},
        "buffer_paths": {"h": [], "unknown": []},
    }  # fmt: skip
    clean = g.from_guest("comm_msg", {"comm_id": "ctl", "data": data}, [])["data"]
    assert clean["states"] == {
        "h": {"_model_name": "HTMLModel", "_model_module": "@jupyter-widgets/controls", "value": "ok"}
    }
    assert clean["buffer_paths"] == {"h": []}
    assert g.comm_info("jupyter.widget.control") == {"ctl": {"target_name": "jupyter.widget.control"}}


def test_messages_on_comms_never_opened_or_of_unknown_methods_are_refused():
    g = guard()
    with pytest.raises(CommRefused, match="comm x is not open"):
        update(g, "x", value=1)
    open_widget(g, "a", "IntSliderModel")
    with pytest.raises(CommRefused, match="not one widgets send"):
        g.from_guest("comm_msg", {"comm_id": "a", "data": {"method": "eval"}}, [])
    with pytest.raises(CommRefused, match="open already"):
        open_widget(g, "a", "IntSliderModel")
    g.from_guest("comm_close", {"comm_id": "a", "data": {}}, [])
    assert g.comm_info(None) == {}


def test_trusted_output_passes_any_module_and_target():
    g = WidgetGuard(OutputSanitizer(trusted=True))
    assert open_widget(g, "a", "HTMLModel", "anything", value="<script>x</script>")["value"] == "<script>x</script>"
    assert g.from_guest("comm_open", {"comm_id": "b", "target_name": "bokeh", "data": {}}, [])


def test_buffers_must_be_base64():
    assert decoded_buffers(["aGk="]) == [b"hi"]
    with pytest.raises(CommRefused, match="not base64"):
        decoded_buffers(["a*b"])

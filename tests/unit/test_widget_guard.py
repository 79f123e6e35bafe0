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
    return g.from_guest("comm_open", content, [])[0]["data"]["state"]


def update(g: WidgetGuard, comm_id: str, buffers: list[bytes] | None = None, paths=None, **state: Any):
    data = {"method": "update", "state": state, "buffer_paths": paths or []}
    return g.from_guest("comm_msg", {"comm_id": comm_id, "data": data}, buffers or [])[0]["data"]["state"]


def test_only_widget_targets_open():
    with pytest.raises(CommRefused, match=r"comm target 'bokeh\.comm' is not one the sandbox may open"):
        guard().from_guest("comm_open", {"comm_id": "a", "target_name": "bokeh.comm", "data": {}}, [])


def test_only_allowed_modules_and_the_setting_adds_one():
    with pytest.raises(CommRefused, match=r"widget module 'bqplot' is not allowed.*SandboxKernel\.widget_modules"):
        open_widget(guard(), "a", "FigureModel", "bqplot")
    assert open_widget(guard(extra_modules=frozenset({"bqplot"})), "a", "FigureModel", "bqplot")
    g = guard()
    open_widget(g, "b", "IntSliderModel")
    with pytest.raises(CommRefused, match="_model_module is '@jupyter-widgets/controls' from its opening"):
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


def test_messages_on_comms_never_opened_or_of_unknown_methods_are_refused():
    g = guard()
    with pytest.raises(CommRefused, match="comm x is not open"):
        update(g, "x", value=1)
    open_widget(g, "a", "IntSliderModel")
    with pytest.raises(CommRefused, match="not one widgets send on this comm"):
        g.from_guest("comm_msg", {"comm_id": "a", "data": {"method": "eval"}}, [])
    with pytest.raises(CommRefused, match="open already"):
        open_widget(g, "a", "IntSliderModel")
    g.from_guest("comm_close", {"comm_id": "a", "data": {}}, [])
    assert g.comm_info(None) == {}


def test_trusted_output_passes_any_module_and_target():
    g = WidgetGuard(OutputSanitizer(trusted=True))
    assert open_widget(g, "a", "HTMLModel", "anything", value="<script>x</script>")["value"] == "<script>x</script>"
    assert g.from_guest("comm_open", {"comm_id": "b", "target_name": "bokeh", "data": {}}, [])[0]


def test_buffers_must_be_base64():
    assert decoded_buffers(["aGk="]) == [b"hi"]
    with pytest.raises(CommRefused, match="not base64"):
        decoded_buffers(["a*b"])


# ---- identities are fixed at comm_open --------------------------------------------------------------


def test_an_update_may_not_rename_the_model_or_its_view():
    """The browser's model stays what it opened as: a guard that judged the new name's traits would clean an
    HTMLModel's value as a label's, and the HTMLView would draw it raw."""
    g = guard()
    open_widget(g, "h", "HTMLModel", value="")
    for key, given in [("_model_name", "LabelModel"), ("_view_name", "LabelView"), ("_model_module_version", "2.1.0"),
                       ("_view_module", "@jupyter-widgets/base")]:  # fmt: skip
        with pytest.raises(CommRefused, match=f"HTMLModel's {key} is .* it may not become '{given}'"):
            update(g, "h", **{key: given, "value": "<img src=x onerror=alert(1)>"})
    echo = {"method": "echo_update", "state": {"_model_name": "LabelModel"}, "buffer_paths": []}
    with pytest.raises(CommRefused, match="may not become 'LabelModel'"):
        g.from_guest("comm_msg", {"comm_id": "h", "data": echo}, [])
    # The same identity again (ipywidgets' send_state() sends every trait) is fine, and the value is cleaned.
    assert update(g, "h", _model_name="HTMLModel", value="<img src=x onerror=alert(1)>")["value"] == '<img src="x">'


def test_a_model_is_drawn_only_by_its_own_view():
    with pytest.raises(CommRefused, match="a LabelModel is drawn by @jupyter-widgets/controls's LabelView, not by"):
        open_widget(guard(), "l", "LabelModel", _view_name="HTMLView", _view_module="@jupyter-widgets/controls")
    with pytest.raises(CommRefused, match="has no model 'EvilModel'"):
        open_widget(guard(), "e", "EvilModel")
    with pytest.raises(CommRefused, match=r"_model_module_version '1\.5\.0' is not @jupyter-widgets/controls 2\.x"):
        open_widget(guard(), "v", "IntSliderModel", _model_module_version="1.5.0")
    with pytest.raises(CommRefused, match="_model_name is not a string"):
        open_widget(guard(), "n", ["HTMLModel"])
    # A third-party module's model may use its own views, never a core one.
    g = guard(extra_modules=frozenset({"bqplot"}))
    assert open_widget(g, "f", "FigureModel", "bqplot", _view_name="Figure", _view_module="bqplot")
    with pytest.raises(CommRefused, match=r"may be drawn only by a view of a module in SandboxKernel\.widget_modules"):
        open_widget(g, "x", "FigureModel", "bqplot", _view_name="HTMLView", _view_module="@jupyter-widgets/controls")


def test_the_sandbox_opens_only_widget_comms():
    with pytest.raises(CommRefused, match=r"'jupyter\.widget\.control' is not one the sandbox may open"):
        guard().from_guest("comm_open", {"comm_id": "c", "target_name": "jupyter.widget.control", "data": {}}, [])


# ---- every trait drawn as HTML is cleaned; what the table does not know is cleaned as HTML -----------------


def test_html_traits_must_be_strings_and_unknown_traits_are_cleaned_as_html():
    g = guard()
    with pytest.raises(CommRefused, match="HTMLModel's value is drawn as HTML and must be a string"):
        open_widget(g, "h", "HTMLModel", value=["<img src=x onerror=alert(1)>"])  # innerHTML = a list's text
    state = open_widget(g, "s", "IntSliderModel", value=3, future_trait="<img src=x onerror=alert(1)>")
    assert state["value"] == 3 and state["future_trait"] == '<img src="x">'
    with pytest.raises(CommRefused, match="description must be a string"):
        open_widget(g, "c", "CheckboxModel", description=["<b>x</b>"], description_allow_html=True)


# ---- the reply to request_states, in ipywidgets' format ---------------------------------------------------


def states_reply(g: WidgetGuard, states: dict[str, Any], paths: list[list[Any]], buffers: list[bytes]):
    g.from_frontend("comm_open", {"comm_id": "ctl", "target_name": "jupyter.widget.control"})
    data = {"method": "update_states", "states": states, "buffer_paths": paths}
    return g.from_guest("comm_msg", {"comm_id": "ctl", "data": data}, buffers)


def entry(name: str, module: str = "@jupyter-widgets/controls", **state: Any) -> dict[str, Any]:
    return {"model_name": name, "model_module": module, "model_module_version": "2.0.0", "state": state}


def test_the_state_reply_is_cleaned_widget_by_widget_at_the_nested_level():
    g = guard()
    open_widget(g, "h", "HTMLModel", value="")
    open_widget(g, "s", "IntSliderModel", value=1)
    open_widget(g, "i", "ImageModel", format="png")
    states = {
        "h": entry("HTMLModel", value="<b>ok</b><img src=x onerror=alert(1)>", _model_name="HTMLModel"),
        "s": entry("IntSliderModel", value=5),
        "i": entry("ImageModel", format="png"),
        "never-opened": entry("HTMLModel", value="<script>x</script>"),
    }
    paths = [["never-opened", "state", "value"], ["i", "state", "value"]]
    content, buffers = states_reply(g, states, paths, [b"dropped", b"\x89PNG"])
    clean = content["data"]
    assert clean["states"]["h"]["state"] == {"value": '<b>ok</b><img src="x">', "_model_name": "HTMLModel"}
    assert clean["states"]["h"]["model_name"] == "HTMLModel"
    assert clean["states"]["s"]["state"] == {"value": 5}
    assert "never-opened" not in clean["states"]
    assert (clean["buffer_paths"], buffers) == ([["i", "state", "value"]], [b"\x89PNG"])  # re-indexed


def test_the_state_reply_may_not_rename_a_widget():
    g = guard()
    open_widget(g, "h", "HTMLModel", value="")
    with pytest.raises(CommRefused, match="entry h names model_name 'LabelModel'"):
        states_reply(g, {"h": entry("LabelModel", value="<img src=x onerror=alert(1)>")}, [], [])
    with pytest.raises(CommRefused, match="_view_name is 'HTMLView' from its opening: it may not become 'LabelView'"):
        states_reply(g, {"h": entry("HTMLModel", _view_name="LabelView")}, [], [])


def test_the_state_reply_judges_media_urls_and_buffer_paths():
    g = guard()
    open_widget(g, "i", "ImageModel", format="png")
    far = [b"https://evil.example/exfil?d=SECRET"]
    with pytest.raises(CommRefused, match=r"evil\.example.*allow_net"):
        states_reply(g, {"i": entry("ImageModel", format="url")}, [["i", "state", "value"]], far)
    with pytest.raises(CommRefused, match="is not \\[id, 'state', trait"):
        states_reply(g, {"i": entry("ImageModel", format="png")}, [["i", "model_name"]], [b"x"])
    with pytest.raises(CommRefused, match="do not match its buffers"):
        states_reply(g, {"i": entry("ImageModel", format="png")}, [["i", "state", "value"]], [])


# ---- buffers fill only what the view reads as bytes, once -------------------------------------------------


def test_duplicate_buffer_paths_are_refused():
    """jupyterlab_widgets' put_buffers applies every path in order: the last one wins, so the guard cannot
    judge the first and let a second through."""
    g = guard()
    open_widget(g, "i", "ImageModel", format="url", value=None)
    ok, far = b"https://img.example/a.png", b"https://evil.example/exfil?d=SECRET"
    with pytest.raises(CommRefused, match=r"buffer path \['value'\] is given twice"):
        update(g, "i", [ok, far], [["value"], ["value"]], value=None)
    with pytest.raises(CommRefused, match="ImageModel takes no binary buffer at \\['width'\\]"):
        update(g, "i", [far], [["width"]])
    with pytest.raises(CommRefused, match="buffers with buffer_paths"):
        update(g, "i", [ok, ok], [["value"]])


def test_buffers_may_not_fill_text_or_identity_traits():
    g = guard()
    open_widget(g, "h", "HTMLModel", value="")
    with pytest.raises(CommRefused, match="HTMLModel takes no binary buffer at \\['value'\\]"):
        update(g, "h", [b"<img src=x onerror=alert(1)>"], [["value"]])
    with pytest.raises(CommRefused, match="is not a path to a trait"):
        update(g, "h", [b"LabelModel"], [["_model_name"]])
    up = guard()
    files = [{"name": "a.txt", "type": "text/plain", "size": 1, "content": None, "last_modified": 0}]
    assert open_widget(up, "u", "FileUploadModel", value=files)  # FileUpload's content is bytes: allowed
    assert update(up, "u", [b"x"], [["value", 0, "content"]], value=files)["value"][0]["name"] == "a.txt"


def test_media_urls_are_judged_for_every_media_model_and_json_values():
    for name in ("ImageModel", "VideoModel", "AudioModel"):
        g = guard()
        open_widget(g, "m", name, format="png")
        with pytest.raises(CommRefused, match=r"URL 'https://evil\.example/x' is not on a host"):
            update(g, "m", [b"https://evil.example/x"], [["value"]], format="url")
        with pytest.raises(CommRefused, match="URL must be bytes or a string"):
            update(g, "m", format="url", value={"buffer": "https://evil.example/x"})


# ---- links: the browser copies values itself ----------------------------------------------------------------


def link(g: WidgetGuard, comm_id: str, source: list[str], target: list[str], name: str = "LinkModel"):
    return open_widget(g, comm_id, name, source=source, target=target, _view_name=None)


def test_links_join_only_traits_that_hold_no_drawn_text():
    g = guard()
    open_widget(g, "a", "IntSliderModel", value=1)
    open_widget(g, "b", "IntTextModel", value=1)
    open_widget(g, "t", "TextModel", value="")
    open_widget(g, "h", "HTMLModel", value="")
    open_widget(g, "c", "CheckboxModel", value=False)
    assert link(g, "l1", ["IPY_MODEL_a", "value"], ["IPY_MODEL_b", "value"])  # jslink of two numbers
    assert link(g, "l2", ["IPY_MODEL_t", "value"], ["IPY_MODEL_t", "value"])  # typed text into an input
    for target, why in [(["IPY_MODEL_h", "value"], "HTMLModel's 'value'"),
                        (["IPY_MODEL_c", "description"], "CheckboxModel's 'description'"),
                        (["IPY_MODEL_c", "description_allow_html"], "CheckboxModel's 'description_allow_html'")]:  # fmt: skip
        for name in ("LinkModel", "DirectionalLinkModel"):
            with pytest.raises(CommRefused, match=f"a {name} may not join a {why}"):
                link(g, f"x-{name}-{why[:5]}", ["IPY_MODEL_t", "value"], target, name)
    with pytest.raises(CommRefused, match="'IPY_MODEL_nope' is not a widget the sandbox opened"):
        link(g, "l3", ["IPY_MODEL_a", "value"], ["IPY_MODEL_nope", "value"])
    with pytest.raises(CommRefused, match="is not \\[IPY_MODEL_<id>, trait\\]"):
        link(g, "l4", ["IPY_MODEL_a", "value"], ["IPY_MODEL_b"])
    with pytest.raises(CommRefused, match="may not join a HTMLModel's 'value'"):
        update(g, "l1", target=["IPY_MODEL_h", "value"])  # a link moved later is judged again


# ---- found by the attack pass of 2026-12-02 ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ImageModel", "VideoModel", "AudioModel"])
@pytest.mark.parametrize(
    "url",
    [b"\xef\xbb\xbfhttp://evil.example/x", b"\xef\xbb\xbf//evil.example/x", b"/x\n", b"\xe2\x80\x8b//evil.example/x"],
    ids=["bom-absolute", "bom-protocol-relative", "newline", "zero-width"],
)
def test_a_media_url_is_judged_as_the_browser_reads_it(name: str, url: bytes):
    g = guard()
    open_widget(g, "m", name, format="png")
    with pytest.raises(CommRefused, match="URL must be printable ASCII"):
        update(g, "m", [url], [["value"]], format="url")
    assert update(g, "m", [b"https://img.example/a.png"], [["value"]], format="url") == {"format": "url"}


def test_a_widget_may_not_contain_itself():
    g = guard()
    open_widget(g, "a", "VBoxModel", children=[])
    open_widget(g, "b", "HBoxModel", children=["IPY_MODEL_a"])
    with pytest.raises(CommRefused, match="may not contain itself"):
        update(g, "a", children=["IPY_MODEL_b"])
    with pytest.raises(CommRefused, match="may not contain itself"):
        update(g, "a", children=["IPY_MODEL_a"])
    with pytest.raises(CommRefused, match="may not contain itself"):
        open_widget(g, "c", "BoxModel", children=["IPY_MODEL_c"])
    assert "c" not in g.comms  # a refused open leaves nothing open
    open_widget(g, "d", "VBoxModel", children=["IPY_MODEL_a", "IPY_MODEL_b"])  # shared children: no cycle
    assert update(g, "b", children=[])["children"] == []
    assert update(g, "a", children=["IPY_MODEL_b"])["children"] == ["IPY_MODEL_b"]  # no longer a cycle


def test_output_widget_outputs_are_rebuilt_from_their_fields():
    g = guard()
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": {"a": 1}},
        {"output_type": "stream", "name": "stdout", "text": ["a", "b"], "extra": "<script>"},
        {"output_type": "stream", "name": "nope", "text": "x"},
        {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["t"], "transient": {"x": 1}},
        {"output_type": "error", "ename": "E", "evalue": 1, "traceback": []},
        {"output_type": "execute_result", "data": {"text/plain": "1"}, "metadata": {}, "execution_count": "x"},
    ]
    state = open_widget(g, "o", "OutputModel", "@jupyter-widgets/output", outputs=outputs)
    assert state["outputs"] == [
        {"output_type": "stream", "name": "stdout", "text": "ab"},
        {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["t"]},
        {"output_type": "execute_result", "data": {"text/plain": "1"}, "metadata": {}, "execution_count": None},
    ]

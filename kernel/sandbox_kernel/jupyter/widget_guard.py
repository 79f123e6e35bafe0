"""Checks the sandbox's comm traffic (widgets) before the browser gets it: widget state is output too.

Only the widget comm targets are opened, only models of the widget modules JupyterLab ships (and those
SandboxKernel.widget_modules adds) are created, and a model's state is cleaned as outputs are: HTML that
renders (HTML and HTMLMath values, descriptions with description_allow_html) goes through the output
sanitizer, every other text loses MathJax's active commands, an Output widget's outputs are cleaned as
outputs, media given by URL must be allowed as an image's URL, and layout and style values may not fetch
(no url(), image() or escapes). The kernel keeps what each comm is, so a later update is judged by its model.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any

from sandbox_kernel.jupyter.sanitize import OutputSanitizer, inert_math

WIDGET_TARGETS = frozenset({"jupyter.widget", "jupyter.widget.control"})
CORE_MODULES = frozenset({"@jupyter-widgets/base", "@jupyter-widgets/controls", "@jupyter-widgets/output"})
HTML_MODELS = frozenset({"HTMLModel", "HTMLMathModel"})
MEDIA_MODELS = frozenset({"ImageModel", "VideoModel", "AudioModel"})
# Text the user edits, shown as typed (never typeset): left as it is, so what comes back is what was sent.
TEXT_INPUTS = frozenset({"TextModel", "TextareaModel", "PasswordModel", "ComboboxModel"})
MAX_COMMS = 10_000  # comms open at once (a widget is one comm)
# CSS that fetches or escapes: url(), image(), image-set(), cross-fade(), element(), expression(), src(), @import.
CSS_FETCH = re.compile(r"\b(?:url|image|image-set|cross-fade|element|expression|src|paint)\s*\(|@import|\\", re.I)
OUTPUT_TYPES = frozenset({"display_data", "execute_result", "stream", "error"})


class CommRefused(ValueError):
    """A comm message from the sandbox that may not reach the browser (the message says why)."""


@dataclass
class _Model:
    """What the kernel remembers of one open comm."""

    target: str
    name: str = ""
    module: str = ""
    allow_html: bool = False
    description: str = ""
    media_url: bool = False  # an Image/Video/Audio whose format is 'url'


@dataclass
class WidgetGuard:
    """The kernel's record of open comms, and the rules for what the sandbox sends over them."""

    sanitizer: OutputSanitizer
    extra_modules: frozenset[str] = frozenset()
    comms: dict[str, _Model] = field(default_factory=dict)

    @property
    def modules(self) -> frozenset[str]:
        return CORE_MODULES | self.extra_modules

    def forget_all(self) -> None:
        """A new sandbox holds no comms."""
        self.comms.clear()

    # ---- the frontend's messages (trusted): only recorded ------------------------------------
    def from_frontend(self, msg_type: str, content: dict[str, Any]) -> None:
        comm_id = str(content.get("comm_id", ""))
        if msg_type == "comm_open" and len(self.comms) < MAX_COMMS:
            self.comms[comm_id] = _Model(str(content.get("target_name", "")))
        elif msg_type == "comm_close":
            self.comms.pop(comm_id, None)

    def comm_info(self, target_name: str | None) -> dict[str, dict[str, str]]:
        """comm_info_reply's `comms`: the open comms (of one target, if named)."""
        return {
            comm_id: {"target_name": model.target}
            for comm_id, model in self.comms.items()
            if target_name is None or model.target == target_name
        }

    # ---- the sandbox's messages (untrusted) ----------------------------------------------------
    def from_guest(self, msg_type: str, content: dict[str, Any], buffers: list[bytes]) -> dict[str, Any]:
        """The content as it may go to the frontend; CommRefused says why it may not."""
        comm_id = content["comm_id"]
        data = dict(content["data"])
        if msg_type == "comm_open":
            target = content["target_name"]
            if target not in WIDGET_TARGETS and not self.sanitizer.trusted:
                raise CommRefused(
                    f"comm target {target!r} is not one the sandbox may open (only {', '.join(sorted(WIDGET_TARGETS))}: "
                    "other targets reach browser extensions that trust what they get; SandboxKernel.trust_output "
                    "lifts this)"
                )
            if comm_id in self.comms:
                raise CommRefused(f"comm {comm_id} is open already")
            if len(self.comms) >= MAX_COMMS:
                raise CommRefused(f"more than {MAX_COMMS} comms open at once")
            model = _Model(target)
            if target == "jupyter.widget":
                data = self._clean_update(model, data, buffers, opening=True)
            self.comms[comm_id] = model
            return {**content, "data": data}
        known = self.comms.get(comm_id)
        if known is None:
            raise CommRefused(f"comm {comm_id} is not open")
        model = known
        if msg_type == "comm_close":
            del self.comms[comm_id]
            return content
        method = data.get("method")
        if method in ("update", "echo_update") and model.target == "jupyter.widget":
            data = self._clean_update(model, data, buffers)
        elif method == "update_states" and model.target == "jupyter.widget.control":
            data = self._clean_states(data, buffers)
        elif method != "custom":
            raise CommRefused(f"comm message method {str(method)[:40]!r} is not one widgets send")
        return {**content, "data": data}

    # ---- widget state ------------------------------------------------------------------------------
    def _clean_states(self, data: dict[str, Any], buffers: list[bytes]) -> dict[str, Any]:
        """The control comm's reply: every widget's full state (each judged by its own model)."""
        states = data.get("states")
        paths = data.get("buffer_paths")
        if not isinstance(states, dict) or not isinstance(paths, dict):
            raise CommRefused("update_states without states and buffer_paths")
        clean: dict[str, Any] = {}
        for comm_id, state in states.items():
            model = self.comms.get(comm_id)
            if model is None or model.target != "jupyter.widget" or not isinstance(state, dict):
                continue  # not a widget this kernel saw opened: the frontend does not get it
            update = {"state": state, "buffer_paths": paths.get(comm_id, [])}
            clean[comm_id] = self._clean_update(_Model(model.target), update, buffers, opening=True)["state"]
        return {**data, "states": clean, "buffer_paths": {k: v for k, v in paths.items() if k in clean}}

    def _clean_update(
        self, model: _Model, data: dict[str, Any], buffers: list[bytes], opening: bool = False
    ) -> dict[str, Any]:
        state = data.get("state")
        if not isinstance(state, dict):
            raise CommRefused("a widget message without a state")
        state = dict(state)
        for key in ("_model_module", "_model_name", "_view_module"):
            if key in state and not (state[key] is None or isinstance(state[key], str)):
                raise CommRefused(f"{key} is not a string")
        model.name = state.get("_model_name", model.name) or ""
        model.module = state.get("_model_module", model.module) or ""
        if opening and not model.name:
            raise CommRefused("a widget without _model_name")
        if not self.sanitizer.trusted:
            for key in ("_model_module", "_view_module"):
                module = model.module if key == "_model_module" else state.get(key)
                if (key in state or opening) and module and module not in self.modules:
                    raise CommRefused(
                        f"widget module {module[:100]!r} is not allowed (allowed: {', '.join(sorted(self.modules))}; "
                        "add one with SandboxKernel.widget_modules)"
                    )
            state = self._clean_state(model, state, data.get("buffer_paths"), buffers)
        return {**data, "state": state}

    def _clean_state(self, model: _Model, state: dict[str, Any], paths: Any, buffers: list[bytes]) -> dict[str, Any]:
        if "description_allow_html" in state:
            model.allow_html = state["description_allow_html"] is True
        if isinstance(state.get("description"), str):
            model.description = state["description"]
        if model.allow_html and ("description" in state or "description_allow_html" in state):
            state["description"] = self.sanitizer.html(model.description)  # HTML now: the last text, cleaned
        clean: dict[str, Any] = {}
        for key, value in state.items():
            if key == "description" and model.allow_html:
                clean[key] = value
            elif key == "value" and model.name in HTML_MODELS and isinstance(value, str):
                clean[key] = self.sanitizer.html(value)
            elif key == "outputs" and model.name == "OutputModel":
                clean[key] = self._clean_outputs(value)
            elif model.name.endswith(("LayoutModel", "StyleModel")) and _fetches(value):
                continue  # a layout or style value that would fetch something is left out
            elif key == "value" and model.name in TEXT_INPUTS:
                clean[key] = value
            else:
                clean[key] = _inert(value)
        if model.name in MEDIA_MODELS:
            if isinstance(state.get("format"), str):
                model.media_url = state["format"] == "url"
            self._check_media(model, state, paths, buffers)
        return clean

    def _clean_outputs(self, outputs: Any) -> list[dict[str, Any]]:
        if not isinstance(outputs, list):
            raise CommRefused("an Output widget's outputs are not a list")
        clean = []
        for output in outputs:
            if not isinstance(output, dict) or output.get("output_type") not in OUTPUT_TYPES:
                continue
            if output["output_type"] in ("display_data", "execute_result"):
                data = output.get("data")
                if not isinstance(data, dict):
                    continue
                bundle = self.sanitizer.bundle(
                    data, output.get("metadata") if isinstance(output.get("metadata"), dict) else None
                )
                output = {**output, "data": bundle.data, "metadata": bundle.metadata}
            clean.append(output)
        return clean

    def _check_media(self, model: _Model, state: dict[str, Any], paths: Any, buffers: list[bytes]) -> None:
        """An Image, Video or Audio given by URL (format 'url'): the browser fetches it, so it must be allowed."""
        if not model.media_url:
            return
        index = _buffer_index(paths, ["value"])
        if index is None and "value" not in state:
            if "format" in state:  # the value sent before would become the URL
                raise CommRefused(f"a {model.name[:-5]} widget's format became 'url' without a new value")
            return
        url = state.get("value") if index is None else buffers[index] if index < len(buffers) else b""
        if isinstance(url, (bytes, bytearray)):
            url = bytes(url).decode("utf-8", "replace")
        if isinstance(url, str) and url and not self.sanitizer.image_allowed(url):
            raise CommRefused(
                f"a {model.name[:-5]} widget's URL {url[:100]!r} is not on a host in SandboxKernel.allow_net (the "
                "browser would fetch it, and a URL can carry the sandbox's data out)"
            )


def _buffer_index(paths: Any, path: list[str]) -> int | None:
    if isinstance(paths, list):
        for index, entry in enumerate(paths):
            if entry == path:
                return index
    return None


def _inert(value: Any) -> Any:
    """Text the widget views typeset with MathJax (labels, descriptions, options): its active commands made plain."""
    if isinstance(value, str):
        return inert_math(value)
    if isinstance(value, list):
        return [_inert(item) for item in value]
    if isinstance(value, dict):
        return {key: _inert(item) for key, item in value.items()}
    return value


def _fetches(value: Any) -> bool:
    if isinstance(value, str):
        return bool(CSS_FETCH.search(value))
    if isinstance(value, (list, dict)):
        return any(_fetches(item) for item in (value.values() if isinstance(value, dict) else value))
    return False


def decoded_buffers(encoded: list[str]) -> list[bytes]:
    """The event's base64 buffers as bytes; CommRefused if one is not base64."""
    try:
        return [base64.b64decode(text, validate=True) for text in encoded]
    except (binascii.Error, ValueError):
        raise CommRefused("a comm buffer is not base64") from None

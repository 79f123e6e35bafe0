"""Checks the sandbox's comm traffic (widgets) before the browser gets it: widget state is output too.

Default-deny, by the table in widget_models.py: the sandbox may open only `jupyter.widget` comms, and each
widget's identity (model and view: module, name, version) is fixed when it opens and must be an allowed model with
its own view (third-party modules only when SandboxKernel.widget_modules names them). Nothing later (an update,
an echo, the reply to the frontend's `request_states`) may name another identity. On every path that carries
state, a trait the model's view draws as HTML is cleaned by the output sanitizer, every other text loses MathJax's
active commands, a trait the table does not know for the model is cleaned as HTML, an Output widget's outputs are
cleaned as outputs, media given by URL must be allowed as an image's URL, layout and style values may not fetch,
buffers may fill only the traits the view reads as bytes (each path once), and a link (jslink, jsdlink) may join
only traits that hold numbers, booleans, dates or typed text.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any

from sandbox_kernel.jupyter.sanitize import OutputSanitizer, inert_math
from sandbox_kernel.jupyter.widget_models import IDENTITY, LINK_MODELS, Identity, Spec, identity_problem

WIDGET_TARGET = "jupyter.widget"
CONTROL_TARGET = "jupyter.widget.control"
WIDGET_TARGETS = frozenset({WIDGET_TARGET, CONTROL_TARGET})
MAX_COMMS = 10_000  # comms open at once (a widget is one comm)
# CSS that fetches or escapes: url(), image(), image-set(), cross-fade(), element(), expression(), src(), @import.
CSS_FETCH = re.compile(r"\b(?:url|image|image-set|cross-fade|element|expression|src|paint)\s*\(|@import|\\", re.I)
OUTPUT_TYPES = frozenset({"display_data", "execute_result", "stream", "error"})
MODEL_REF = "IPY_MODEL_"
PLAIN_URL = re.compile(r"[\x21-\x7e]+")  # a media URL as the browser will parse it: nothing it strips or folds
MAX_OUTPUT_TEXT_PARTS = 10_000  # a stream output's text given as a list of strings
STATE_ENTRY = {
    "model_name": "_model_name",
    "model_module": "_model_module",
    "model_module_version": "_model_module_version",
}


class CommRefused(ValueError):
    """A comm message from the sandbox that may not reach the browser (the message says why)."""


@dataclass
class _Model:
    """What the kernel remembers of one open comm."""

    target: str
    identity: Identity | None = None  # fixed at comm_open (a widget the sandbox opened)
    comm_id: str = ""
    allow_html: bool = False
    description: str = ""
    media_url: bool = False  # an Image/Video/Audio whose format is 'url'
    refs: dict[str, frozenset[str]] = field(default_factory=dict)  # trait -> the comm ids it names (IPY_MODEL_)


Path = tuple[str | int, ...]


@dataclass
class WidgetGuard:
    """The kernel's record of open comms, and the rules for what the sandbox sends over them."""

    sanitizer: OutputSanitizer
    extra_modules: frozenset[str] = frozenset()
    comms: dict[str, _Model] = field(default_factory=dict)

    def forget_all(self) -> None:
        """A new sandbox holds no comms."""
        self.comms.clear()

    # ---- the frontend's messages (trusted): only recorded ------------------------------------
    def from_frontend(self, msg_type: str, content: dict[str, Any]) -> None:
        comm_id = str(content.get("comm_id", ""))
        if msg_type == "comm_open" and len(self.comms) < MAX_COMMS and comm_id not in self.comms:
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
    def from_guest(
        self, msg_type: str, content: dict[str, Any], buffers: list[bytes]
    ) -> tuple[dict[str, Any], list[bytes]]:
        """The content and buffers as they may go to the frontend; CommRefused says why they may not."""
        comm_id = content["comm_id"]
        data = dict(content["data"])
        if msg_type == "comm_open":
            target = content["target_name"]
            if comm_id in self.comms:
                raise CommRefused(f"comm {comm_id} is open already")
            if len(self.comms) >= MAX_COMMS:
                raise CommRefused(f"more than {MAX_COMMS} comms open at once")
            if self.sanitizer.trusted:
                self.comms[comm_id] = _Model(target)
                return content, buffers
            if target != WIDGET_TARGET:
                raise CommRefused(
                    f"comm target {target!r} is not one the sandbox may open (only {WIDGET_TARGET}: other targets "
                    "reach browser extensions that trust what they get; SandboxKernel.trust_output lifts this)"
                )
            state = data.get("state")
            if not isinstance(state, dict):
                raise CommRefused("a widget message without a state")
            identity, problem = identity_problem(state, self.extra_modules)
            if identity is None:
                raise CommRefused(problem)
            model = _Model(target, identity, comm_id)
            self.comms[comm_id] = model  # so that a state naming its own comm is seen to contain itself
            try:
                data["state"] = self._clean_state(model, state, data.get("buffer_paths", []), buffers)
            except CommRefused:
                del self.comms[comm_id]
                raise
            return {**content, "data": data}, buffers
        known = self.comms.get(comm_id)
        if known is None:
            raise CommRefused(f"comm {comm_id} is not open")
        model = known
        if msg_type == "comm_close":
            del self.comms[comm_id]
            return content, buffers
        if self.sanitizer.trusted:
            return content, buffers
        method = data.get("method")
        if method in ("update", "echo_update") and model.identity is not None:
            state = data.get("state")
            if not isinstance(state, dict):
                raise CommRefused("a widget message without a state")
            data["state"] = self._clean_state(model, state, data.get("buffer_paths", []), buffers)
        elif method == "update_states" and model.target == CONTROL_TARGET:
            data, buffers = self._clean_states(data, buffers)
        elif method != "custom" or model.identity is None:
            raise CommRefused(f"comm message method {str(method)[:40]!r} is not one widgets send on this comm")
        return {**content, "data": data}, buffers

    # ---- widget state ------------------------------------------------------------------------------
    def _clean_states(self, data: dict[str, Any], buffers: list[bytes]) -> tuple[dict[str, Any], list[bytes]]:
        """The control comm's reply to request_states, in ipywidgets' format: `states[id]` holds model_name,
        model_module, model_module_version and `state`; `buffer_paths` is one list, each path starting with the
        widget's id and 'state'. Each widget is judged by the identity it opened with; one the kernel never saw
        opened is left out, with its buffers."""
        states, paths = data.get("states"), data.get("buffer_paths", [])
        if not isinstance(states, dict) or not isinstance(paths, list) or len(paths) != len(buffers):
            raise CommRefused("update_states without states, or with buffer_paths that do not match its buffers")
        grouped: dict[str, list[tuple[Path, bytes]]] = {}
        for path, buffer in zip(paths, buffers, strict=True):
            if not isinstance(path, list) or len(path) < 3 or path[0] not in states or path[1] != "state":
                raise CommRefused(f"update_states buffer path {str(path)[:100]} is not [id, 'state', trait, ...]")
            grouped.setdefault(str(path[0]), []).append((tuple(path[2:]), buffer))
        clean: dict[str, Any] = {}
        out_paths: list[list[Any]] = []
        out_buffers: list[bytes] = []
        for comm_id, entry in states.items():
            model = self.comms.get(comm_id)
            if model is None or model.identity is None:
                continue  # not a widget this kernel saw opened: the frontend does not get it
            identity = model.identity
            if not isinstance(entry, dict) or not isinstance(entry.get("state"), dict):
                raise CommRefused(f"update_states entry {comm_id} is not {{model_name, ..., state}}")
            for key in entry.keys() - {"state"}:
                if key not in STATE_ENTRY or entry[key] != identity.value(STATE_ENTRY[key]):
                    raise CommRefused(f"update_states entry {comm_id} names {key} {str(entry[key])[:100]!r}")
            mine = grouped.get(comm_id, [])
            state = self._clean_state(model, entry["state"], [list(p) for p, _ in mine], [b for _, b in mine])
            clean[comm_id] = {**{k: v for k, v in entry.items() if k != "state"}, "state": state}
            out_paths += [[comm_id, "state", *path] for path, _ in mine]
            out_buffers += [buffer for _, buffer in mine]
        return {**data, "states": clean, "buffer_paths": out_paths}, out_buffers

    def _clean_state(self, model: _Model, state: dict[str, Any], paths: Any, buffers: list[bytes]) -> dict[str, Any]:
        """One widget's state (an open's, an update's or a state reply's), judged by its fixed identity."""
        identity = model.identity
        assert identity is not None
        for key in IDENTITY:
            if key in state and state[key] != identity.value(key):
                raise CommRefused(
                    f"a {identity.model_name[:100]}'s {key} is {str(identity.value(key))[:100]!r} from its opening: "
                    f"it may not become {str(state[key])[:100]!r}"
                )
        spec = identity.spec
        filled = self._buffer_paths(identity, spec, paths, buffers)
        state = dict(state)
        if spec is None or "description_allow_html" in spec.traits:
            self._description(model, state)
        clean: dict[str, Any] = {}
        for key, value in state.items():
            if key in IDENTITY:
                clean[key] = value
            elif key == "description" and model.allow_html:
                clean[key] = value  # cleaned as HTML by _description
            elif spec is None:
                clean[key] = _inert(value)  # a trusted module's model: its views get what it wrote
            elif spec.css:
                if not _fetches(value):
                    clean[key] = _inert(value)  # a layout or style value that would fetch something is left out
            elif key in spec.html:
                if not isinstance(value, str):
                    raise CommRefused(f"a {identity.model_name}'s {key} is drawn as HTML and must be a string")
                clean[key] = self.sanitizer.html(value)
            elif key == "outputs" and identity.model_name == "OutputModel":
                clean[key] = self._clean_outputs(value)
            elif key in spec.typed and isinstance(value, str):
                clean[key] = value  # shown in an input as typed, never typeset: what comes back is what was sent
            elif key in ("source", "target") and identity.model_name in LINK_MODELS:
                clean[key] = self._link_end(identity.model_name, key, value)
            elif spec.knows(key):
                clean[key] = _inert(value)
            else:
                clean[key] = self._as_html(value)  # not a trait of this model's view: cleaned as if it were HTML
        if spec is not None and spec.media:
            self._check_media(model, state, filled)
        self._check_refs(model, clean)
        return clean

    def _check_refs(self, model: _Model, state: dict[str, Any]) -> None:
        """Record which widgets each trait names; refuse a state through which a widget would contain itself (two
        boxes holding each other hang the browser's widget manager, and every notebook of the tab with it)."""
        named = {key: frozenset(_refs(value)) for key, value in state.items() if key not in IDENTITY}
        refs = {**model.refs, **{key: ids for key, ids in named.items() if ids or key in model.refs}}
        seen: set[str] = set()
        todo = [cid for ids in refs.values() for cid in ids]
        while todo:
            cid = todo.pop()
            if cid == model.comm_id:
                raise CommRefused(
                    f"a {model.identity.model_name if model.identity else 'widget'} may not contain itself, "
                    "directly or through other widgets (the browser would never finish drawing it)"
                )
            if cid in seen:
                continue
            seen.add(cid)
            other = self.comms.get(cid)
            if other is not None:
                todo += [ref for ids in other.refs.values() for ref in ids]
        model.refs = {key: ids for key, ids in refs.items() if ids}

    def _description(self, model: _Model, state: dict[str, Any]) -> None:
        """Track description_allow_html; a description drawn as HTML is sent cleaned (the last text known)."""
        if "description" in state and not isinstance(state["description"], str):
            raise CommRefused("a widget's description must be a string")
        if "description_allow_html" in state:
            model.allow_html = state["description_allow_html"] is True
        if "description" in state:
            model.description = state["description"]
        if model.allow_html and ("description" in state or "description_allow_html" in state):
            state["description"] = self.sanitizer.html(model.description)  # HTML now: the last text, cleaned

    def _as_html(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.sanitizer.html(value)
        if isinstance(value, list):
            return [self._as_html(item) for item in value]
        if isinstance(value, dict):
            return {key: self._as_html(item) for key, item in value.items()}
        return value

    def _buffer_paths(
        self, identity: Identity, spec: Spec | None, paths: Any, buffers: list[bytes]
    ) -> dict[Path, bytes]:
        """The buffers by the path the browser puts each one at (put_buffers applies every path, in order)."""
        if paths is None:
            paths = []
        if not isinstance(paths, list) or len(paths) != len(buffers):
            raise CommRefused(f"{len(buffers)} buffers with buffer_paths {str(paths)[:100]}")
        filled: dict[Path, bytes] = {}
        for raw, buffer in zip(paths, buffers, strict=True):
            ok = (
                isinstance(raw, list)
                and raw
                and all(isinstance(p, (str, int)) and not isinstance(p, bool) for p in raw)
            )
            path: Path = tuple(raw) if ok else ()
            if not path or path[0] in IDENTITY:
                raise CommRefused(f"buffer path {str(raw)[:100]} is not a path to a trait")
            if any(path[: len(other)] == other or other[: len(path)] == path for other in filled):
                raise CommRefused(f"buffer path {list(path)} is given twice (the browser would apply the last)")
            if spec is not None and not any(_fits(path, pattern) for pattern in spec.binary):
                raise CommRefused(f"a {identity.model_name} takes no binary buffer at {list(path)[:5]}")
            filled[path] = buffer
        return filled

    def _link_end(self, model_name: str, key: str, value: Any) -> Any:
        """A link's source or target: [IPY_MODEL_<id>, trait] of a widget the sandbox opened, on a trait a link
        may join (the browser copies the value itself: the kernel never sees it)."""
        if value is None:
            return value
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
            raise CommRefused(f"a {model_name}'s {key} is not [IPY_MODEL_<id>, trait]")
        ref, trait = value
        other = self.comms.get(ref[len(MODEL_REF) :]) if ref.startswith(MODEL_REF) else None
        if other is None or other.identity is None:
            raise CommRefused(f"a {model_name}'s {key} {ref[:100]!r} is not a widget the sandbox opened")
        spec = other.identity.spec
        if spec is not None and trait not in spec.linkable:
            joinable = ", ".join(sorted(spec.linkable)) or "none"
            raise CommRefused(
                f"a {model_name} may not join a {other.identity.model_name}'s {trait[:100]!r}: the browser would copy "
                f"text the kernel never sees into it (traits a link may join there: {joinable})"
            )
        return value

    def _clean_outputs(self, outputs: Any) -> list[dict[str, Any]]:
        """An Output widget's outputs, each rebuilt from the fields of its nbformat type (others left out)."""
        if not isinstance(outputs, list):
            raise CommRefused("an Output widget's outputs are not a list")
        return [clean for output in outputs if (clean := self._clean_output(output)) is not None]

    def _clean_output(self, output: Any) -> dict[str, Any] | None:
        kind = output.get("output_type") if isinstance(output, dict) else None
        if kind not in OUTPUT_TYPES:
            return None
        if kind == "stream":
            text = output.get("text")
            if isinstance(text, list) and len(text) <= MAX_OUTPUT_TEXT_PARTS and all(isinstance(t, str) for t in text):
                text = "".join(text)
            if output.get("name") not in ("stdout", "stderr") or not isinstance(text, str):
                return None
            return {"output_type": kind, "name": output["name"], "text": text}
        if kind == "error":
            traceback = output.get("traceback", [])
            if not (isinstance(traceback, list) and all(isinstance(line, str) for line in traceback)):
                return None
            ename, evalue = output.get("ename"), output.get("evalue")
            if not (isinstance(ename, str) and isinstance(evalue, str)):
                return None
            return {"output_type": kind, "ename": ename, "evalue": evalue, "traceback": traceback}
        data, metadata = output.get("data"), output.get("metadata")
        if not isinstance(data, dict):
            return None
        bundle = self.sanitizer.bundle(data, metadata if isinstance(metadata, dict) else None)
        clean: dict[str, Any] = {"output_type": kind, "data": bundle.data, "metadata": bundle.metadata}
        if kind == "execute_result":
            count = output.get("execution_count")
            clean["execution_count"] = count if isinstance(count, int) and not isinstance(count, bool) else None
        return clean

    def _check_media(self, model: _Model, state: dict[str, Any], filled: dict[Path, bytes]) -> None:
        """An Image, Video or Audio given by URL (format 'url'): the browser fetches it, so it must be allowed."""
        name = model.identity.model_name[:-5] if model.identity else "media"
        if isinstance(state.get("format"), str):
            model.media_url = state["format"] == "url"
        elif "format" in state:
            raise CommRefused(f"a {name} widget's format must be a string")
        if not model.media_url:
            return
        if ("value",) in filled:
            url: Any = filled[("value",)]
        elif "value" in state:
            url = state["value"]
        elif "format" in state:  # the value sent before would become the URL
            raise CommRefused(f"a {name} widget's format became 'url' without a new value")
        else:
            return
        if isinstance(url, (bytes, bytearray)):
            url = bytes(url).decode("utf-8", "replace")
        if url is not None and not isinstance(url, str):
            raise CommRefused(f"a {name} widget's URL must be bytes or a string")
        if url and not PLAIN_URL.fullmatch(url):
            # The browser's TextDecoder drops a leading byte-order mark, and its URL parser strips or folds other
            # characters: a URL judged here must be the very text the browser parses.
            raise CommRefused(
                f"a {name} widget's URL must be printable ASCII (non-ASCII characters percent-encoded); "
                f"{url[:100]!r} is not"
            )
        if url and not self.sanitizer.image_allowed(url):
            raise CommRefused(
                f"a {name} widget's URL {url[:100]!r} is not on a host in SandboxKernel.allow_net (the "
                "browser would fetch it, and a URL can carry the sandbox's data out)"
            )


def _refs(value: Any) -> list[str]:
    """The comm ids a trait's value names as IPY_MODEL_<id> (in lists and dicts too)."""
    if isinstance(value, str):
        return [value[len(MODEL_REF) :]] if value.startswith(MODEL_REF) else []
    if isinstance(value, list):
        return [cid for item in value for cid in _refs(item)]
    if isinstance(value, dict):
        return [cid for item in value.values() for cid in _refs(item)]
    return []


def _fits(path: Path, pattern: tuple[str | type, ...]) -> bool:
    """Whether a buffer path matches a pattern of the table (a type there: any key of that type)."""
    if len(path) != len(pattern):
        return False
    return all(
        isinstance(p, want) and not isinstance(p, bool) if isinstance(want, type) else p == want
        for p, want in zip(path, pattern, strict=True)
    )


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

"""The shell replies that carry the guest's words outside a cell's output: complete, inspect and is_complete.

Each is rebuilt from an allowlist of fields, never passed on: a completion's matches are strings, capped in count
(MAX_MATCHES) and in bytes (max_output_bytes), with JupyterLab's `_jupyter_types_experimental` kept index-aligned
with them, and cursor positions that lie within the request's code; an inspection's bundle is text/plain and the
sanitizer's text/html only, cut at max_output_bytes with a marker in the text; is_complete's indent is blanks only.
What was cut is said in the reply's metadata (`sandbox_kernel.cut`), which JupyterLab ignores.
"""

from __future__ import annotations

from typing import Any

from sandbox_kernel.jupyter.sanitize import OutputSanitizer

MAX_MATCHES = 5000  # JupyterLab lists every match: more help nobody and slow the completer down
MAX_MATCH_CHARS = 1000  # one match (an identifier, a path, a key)
MAX_TYPE_CHARS = 64  # a completion's type (JupyterLab's icon: "function", "module", ...)
MAX_SIGNATURE_CHARS = 1000
MAX_INDENT = 1000
INSPECT_TYPES = ("text/plain", "text/html")  # what the inspector and the tooltip are given
NOTE = "sandbox_kernel"  # the metadata key that says what was cut
NO_ANSWER = "no usable answer from the sandbox (the kernel's log says why)"  # a fallback's note


def cut_marker(max_bytes: int, what: str) -> str:
    """The words put where a reply was cut."""
    return f"[... cut: the reply passed max_output_bytes={max_bytes}; {what} (SandboxKernel.max_output_bytes)]"


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def within(value: Any, length: int) -> bool:
    """Whether `value` is a cursor position in a text of `length` characters (an int, not a bool)."""
    return type(value) is int and 0 <= value <= length


def empty_complete(pos: int, why: str | None = None) -> dict[str, Any]:
    """A reply with no matches (at `pos`), with `why` in its metadata."""
    metadata: dict[str, Any] = {NOTE: {"cut": why}} if why else {}
    return {"status": "ok", "matches": [], "cursor_start": pos, "cursor_end": pos, "metadata": metadata}


def bound_complete(reply: dict[str, Any], code: str, pos: int, max_bytes: int) -> dict[str, Any]:
    """The guest's complete_reply as it may go to the frontend."""
    start: Any = reply.get("cursor_start")
    end: Any = reply.get("cursor_end")
    if not (within(start, len(code)) and within(end, len(code)) and start <= end):
        return empty_complete(pos, f"the sandbox's cursor_start/cursor_end do not lie within the code (0..{len(code)})")
    raw = reply.get("matches")
    matches: list[Any] = raw if isinstance(raw, list) else []
    metadata_in = reply.get("metadata")
    types_in: Any = metadata_in.get("_jupyter_types_experimental") if isinstance(metadata_in, dict) else None
    aligned = isinstance(types_in, list) and len(types_in) == len(matches)
    kept: list[str] = []
    types: list[dict[str, Any]] = []
    spent = 0
    why = None
    for index, match in enumerate(matches):
        if len(kept) == MAX_MATCHES:
            why = f"{len(matches)} matches, the first {MAX_MATCHES} kept"
            break
        if not isinstance(match, str) or len(match) > MAX_MATCH_CHARS:
            why = why or f"matches that are not strings of at most {MAX_MATCH_CHARS} characters were dropped"
            continue
        size = _utf8(match) + 3
        kind = _completion_type(types_in[index], match, len(code)) if aligned else None
        if kind is not None:
            size += sum(_utf8(v) if isinstance(v, str) else 12 for v in kind.values()) + 60
        if spent + size > max_bytes:
            why = cut_marker(max_bytes, f"{len(kept)} of {len(matches)} matches kept")
            break
        spent += size
        kept.append(match)
        types.append(kind or {"start": start, "end": end, "text": match, "type": "<unknown>", "signature": ""})
    metadata: dict[str, Any] = {"_jupyter_types_experimental": types} if aligned else {}
    if why:
        metadata[NOTE] = {"cut": why}
    return {"status": "ok", "matches": kept, "cursor_start": start, "cursor_end": end, "metadata": metadata}


def _completion_type(item: Any, match: str, length: int) -> dict[str, Any] | None:
    """One entry of `_jupyter_types_experimental`, rebuilt, or None if it is not one."""
    if not isinstance(item, dict):
        return None
    start: Any = item.get("start")
    end: Any = item.get("end")
    text = item.get("text", match)
    kind, signature = item.get("type") or "<unknown>", item.get("signature") or ""
    if not (within(start, length) and within(end, length) and start <= end):
        return None
    if not (isinstance(text, str) and len(text) <= MAX_MATCH_CHARS and isinstance(kind, str)):
        return None
    signature = signature[:MAX_SIGNATURE_CHARS] if isinstance(signature, str) else ""
    return {"start": start, "end": end, "text": text, "type": kind[:MAX_TYPE_CHARS], "signature": signature}


def _cut(text: str, max_bytes: int) -> str:
    """`text` within `max_bytes` (UTF-8), the marker at its end when it had to be cut."""
    if _utf8(text) <= max_bytes:
        return text
    marker = "\n" + cut_marker(max_bytes, "the rest of this text was not sent")
    room = max(0, max_bytes - _utf8(marker))
    head = text[:room].encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
    return head + marker


def bound_inspect(reply: dict[str, Any], sanitizer: OutputSanitizer, max_bytes: int) -> dict[str, Any]:
    """The guest's inspect_reply as it may go to the frontend: text/plain (cut) and the sanitizer's text/html,
    which is dropped rather than cut (a cut tag is no HTML); nothing else, and no metadata of the guest's."""
    data: dict[str, Any] = reply["data"] if isinstance(reply.get("data"), dict) else {}
    texts: dict[str, str] = {}
    for mime in INSPECT_TYPES:
        value = data.get(mime)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = "".join(value)
        if isinstance(value, str):
            texts[mime] = value
    metadata: dict[str, Any] = {}
    dropped = sorted(set(data) - set(texts))
    if dropped:
        metadata[NOTE] = {"dropped": dropped[:32]}
    plain = texts.get("text/plain", "")
    clean: dict[str, str] = {}
    if plain or "text/plain" in texts:
        clean["text/plain"] = _cut(plain, max_bytes)
    html = texts.get("text/html")
    if html is not None:
        room = max_bytes - _utf8(clean.get("text/plain", ""))
        cleaned = sanitizer.bundle({"text/html": html}).data.get("text/html") if _utf8(html) <= room else None
        if isinstance(cleaned, str) and _utf8(cleaned) <= room:
            clean["text/html"] = cleaned
        else:
            cut = cut_marker(max_bytes, f"its text/html ({_utf8(html)} bytes) was not sent")
            metadata.setdefault(NOTE, {})["cut"] = cut
            clean.setdefault("text/plain", cut)
    if _utf8(plain) > max_bytes:
        metadata.setdefault(NOTE, {})["cut"] = cut_marker(max_bytes, "its text/plain was cut")
    return {"status": "ok", "found": reply.get("found") is True, "data": clean, "metadata": metadata}


def bound_is_complete(reply: dict[str, Any]) -> dict[str, Any]:
    """is_complete_reply: its status, and an indent of blanks only (JupyterLab inserts it into the cell)."""
    status = reply.get("status")
    if status not in ("complete", "incomplete", "invalid", "unknown"):
        return {"status": "unknown"}
    indent = reply.get("indent")
    if status != "incomplete":
        return {"status": status}
    if not isinstance(indent, str) or len(indent) > MAX_INDENT or indent.strip(" \t"):
        indent = ""
    return {"status": status, "indent": indent}


def payload_item(item: dict[str, Any], sanitizer: OutputSanitizer) -> dict[str, Any] | None:
    """One execute_reply payload item, rebuilt from its source's fields (None: not passed on). The pager's bundle
    is cleaned like display data; set_next_input's text only fills the next cell (it runs nothing); ask_exit and
    edit_magic (a terminal's, which would close the frontend's kernel or open a host editor) are dropped."""
    source = item.get("source")
    if source == "page" and isinstance(item.get("data"), dict):
        start = item.get("start")
        page: dict[str, Any] = {"source": "page", "data": sanitizer.bundle(item["data"]).data}
        page["start"] = start if type(start) is int and start >= 0 else 0
        return page
    if source == "set_next_input" and isinstance(item.get("text"), str):
        return {"source": source, "text": item["text"], "replace": item.get("replace") is True}
    return None


def expression_value(value: Any, sanitizer: OutputSanitizer) -> dict[str, Any]:
    """One user_expressions value, rebuilt: a cleaned bundle (no metadata of the guest's), or an error's fields."""
    if not isinstance(value, dict):
        return {
            "status": "error",
            "ename": "SandboxKernelError",
            "evalue": "not an expression's value",
            "traceback": [],
        }
    if value.get("status") == "ok" and isinstance(value.get("data"), dict):
        return {"status": "ok", "data": sanitizer.bundle(value["data"]).data, "metadata": {}}
    fields = {name: value.get(name) for name in ("ename", "evalue")}
    traceback = value.get("traceback")
    return {
        "status": "error",
        **{name: text if isinstance(text, str) else "" for name, text in fields.items()},
        "traceback": [line for line in traceback if isinstance(line, str)] if isinstance(traceback, list) else [],
    }

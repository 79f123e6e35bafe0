"""ExecutionResult: what one cell produced, built from Jupyter messages (pure logic)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


@dataclass
class ErrorInfo:
    ename: str
    evalue: str
    traceback: str  # plain text, no ANSI codes


@dataclass
class ExecutionResult:
    """The outcome of `Sandbox.run(code)`."""

    stdout: str = ""
    stderr: str = ""
    outputs: list[dict[str, Any]] = field(default_factory=list)  # {"type", "data", "metadata"} per rich output
    result: dict[str, Any] | None = None  # the execute_result mimebundle
    error: ErrorInfo | None = None
    duration_s: float = 0.0
    execution_count: int | None = None
    timed_out: bool = False  # the kernel stopped the cell at its time limit (from the reply's metadata)
    restarted: bool = False  # the sandbox was restarted under the cell: every variable is gone
    # What the cell cost, as the kernel measured it: wall_s, cpu_s (the sandbox process's CPU time),
    # peak_memory_bytes (its wasm memory, which only grows), output_bytes, skill_calls.
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for `json.dumps`): every field, the error as a dict."""
        return asdict(self)

    @property
    def text(self) -> str | None:
        """The result's text/plain, if the cell's last expression had a value."""
        return None if self.result is None else self.result.get("text/plain")

    def to_llm(self, max_chars: int = 4000) -> str:
        """A compact rendering for a language model: output, result, images noticed, error summary."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        stderr = self.stderr
        if self.error is not None:  # the kernel's notice of the error (e.g. a time limit) is said once, below
            notice = f"{self.error.ename}: {self.error.evalue}\n"
            at = stderr.rfind(notice)  # the last one: the same line printed by the cell itself stays
            if at >= 0:
                stderr = stderr[:at] + stderr[at + len(notice) :]
        if stderr:
            parts.append("[stderr]\n" + stderr.rstrip("\n"))
        for out in self.outputs:
            data = out.get("data", {})
            images = [m for m in data if m.startswith("image/")]
            if images:
                parts.append(f"[{images[0]} image displayed]")
            elif "text/plain" in data:
                parts.append(data["text/plain"])
        if self.text is not None:
            parts.append(f"Out: {self.text}")
        if self.error is not None:
            last = [line for line in self.error.traceback.splitlines() if line.strip()][-6:]
            parts.append(f"[error] {self.error.ename}: {self.error.evalue}\n" + "\n".join(last))
        if self.timed_out:
            parts.append("[the cell was stopped: time limit]")
        if self.restarted:
            parts.append("[the sandbox was restarted: all variables were lost]")
        text = "\n".join(parts) if parts else "[no output]"
        if len(text) > max_chars:
            head = max_chars * 2 // 3
            tail = max_chars - head - 40
            text = f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"
        return text


class ResultBuilder:
    """Feeds IOPub messages of one execution into an ExecutionResult, with optional callbacks."""

    def __init__(
        self,
        on_stdout: Callable[[str], None] | None = None,
        on_stderr: Callable[[str], None] | None = None,
        on_output: Callable[[dict[str, Any]], None] | None = None,
        on_notice: Callable[[str, str], None] | None = None,
    ) -> None:
        self.result = ExecutionResult()
        self.on_stdout = on_stdout
        self.on_stderr = on_stderr
        self.on_output = on_output
        self.on_notice = on_notice  # (kind, text) of the kernel's own notices; without it, they go with the stream

    def feed(self, msg: dict[str, Any]) -> None:
        kind, content = msg["msg_type"], msg["content"]
        r = self.result
        if kind == "stream":
            text = content["text"]
            if content["name"] == "stdout":
                r.stdout += text
                callback = self.on_stdout
            else:
                r.stderr += text
                callback = self.on_stderr
            notice = (msg.get("metadata") or {}).get("sandbox_kernel", {}).get("notice")
            if notice and self.on_notice is not None:
                self.on_notice(str(notice), text)
            elif callback is not None:
                callback(text)
        elif kind in ("display_data", "update_display_data", "execute_result"):
            out = {"type": kind, "data": content.get("data", {}), "metadata": content.get("metadata", {})}
            if kind == "execute_result":
                r.result = out["data"]
            else:
                r.outputs.append(out)
            if self.on_output:
                self.on_output(out)
        elif kind == "clear_output":
            r.outputs.clear()
        elif kind == "error":
            r.error = ErrorInfo(
                content.get("ename", ""), content.get("evalue", ""), strip_ansi("\n".join(content.get("traceback", [])))
            )

    def finish(
        self, reply: dict[str, Any], duration_s: float, metadata: dict[str, Any] | None = None
    ) -> ExecutionResult:
        """The result, given the execute_reply's content and metadata (where the kernel itself speaks)."""
        r = self.result
        r.duration_s = duration_s
        r.execution_count = reply.get("execution_count")
        if reply.get("status") == "error":
            traceback = r.error.traceback if r.error is not None else ""
            r.error = ErrorInfo(
                reply.get("ename", ""),
                reply.get("evalue", ""),
                traceback or strip_ansi("\n".join(reply.get("traceback", []))),
            )
        facts = (metadata or {}).get("sandbox_kernel", {})
        r.timed_out = bool(facts.get("timed_out"))
        r.restarted = bool(facts.get("restarted"))
        r.metrics = dict(facts.get("metrics") or {})
        return r

"""IPython display publisher and display hook that send mimebundles to the kernel."""

from __future__ import annotations

from typing import Any

from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher

from . import _host


class BridgeDisplayPublisher(DisplayPublisher):
    """display(), update_display and clear_output, as Jupyter messages."""

    def publish(
        self,
        data: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        source: Any = None,
        *,
        transient: dict[str, Any] | None = None,
        update: bool = False,
        **kwargs: Any,
    ) -> None:
        content = {"data": data, "metadata": metadata or {}, "transient": transient or {}}
        _host.iopub("update_display_data" if update else "display_data", content)

    def clear_output(self, wait: bool = False) -> None:
        _host.iopub("clear_output", {"wait": bool(wait)})


class BridgeDisplayHook(DisplayHook):
    """The value of a cell's last expression, as an execute_result."""

    def write_output_prompt(self) -> None:
        pass

    def write_format_data(self, format_dict: dict[str, Any], md_dict: dict[str, Any] | None = None) -> None:
        content = {"execution_count": self.prompt_count, "data": format_dict, "metadata": md_dict or {}}
        _host.iopub("execute_result", content)

    def finish_displayhook(self) -> None:
        pass  # held stream text went out before the result (`_host.emit` sends it first)

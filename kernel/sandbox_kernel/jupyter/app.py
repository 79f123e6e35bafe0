"""The kernel process: ipykernel's application, launching a SandboxKernel."""

from __future__ import annotations

import os
import re
from typing import Any

from ipykernel.kernelapp import IPKernelApp
from jupyter_core.paths import jupyter_config_path
from traitlets import Type
from traitlets.config.application import Application
from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader
from traitlets.utils.importstring import import_item

from sandbox_kernel.jupyter import settings_check
from sandbox_kernel.jupyter.kernel import SandboxKernel


class SandboxKernelApp(IPKernelApp):
    """Runs SandboxKernel; settings from the command line and sandbox_kernel_config.py/.json."""

    name = "sandbox-kernel"
    # traitlets declarations: mypy sees the trait object where IPKernelApp's annotations name its value
    kernel_class = Type(SandboxKernel, klass="ipykernel.kernelbase.Kernel").tag(config=True)  # type: ignore[assignment]
    classes = [*IPKernelApp.classes, SandboxKernel]  # noqa: RUF012 (traitlets' Application.classes)

    def load_config_file(self, *args: Any, **kwargs: Any) -> None:
        """Read sandbox_kernel_config.{py,json} from every Jupyter config directory."""
        super().load_config_file(*args, **kwargs)  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        for path in reversed(jupyter_config_path()):  # later (user) files override system ones
            Application.load_config_file(self, settings_check.CONFIG_FILE, path=path)

    def init_io(self) -> None:
        """Keep the kernel process's own stdout/stderr: guest output never goes through them."""
        if self.displayhook_class:
            self.displayhook = import_item(str(self.displayhook_class))(self.session, self.iopub_socket)

    def init_control(self, context: Any) -> None:
        """No kernel subshells: ipykernel would run a subshell's requests (JupyterLab's widget manager opens one
        for comm messages) on another thread and event loop, and this kernel's one sandbox serves one request at a
        time on the kernel's own loop. kernel_info then does not offer them, as the protocol asks."""
        super().init_control(context)  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        self.shell_channel_thread = None

    def start(self) -> None:
        """Run the kernel; once its loop has stopped (a shutdown_request), let the control thread finish first.

        After a shutdown_request the control thread still publishes its "idle" status. The process then exits, and
        atexit stops ipykernel's IOPub thread (registered after the app's own close, so it runs first) and closes the
        event pipes under a control thread still sending: ENOTSOCK on stderr, or libzmq's abort ("Assertion failed:
        pfd.revents & POLLIN"). Joining here, before exit, orders it."""
        try:
            super().start()  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        finally:
            self._end_control_thread()

    def close(self) -> None:
        """End the control thread (if start() did not) before ipykernel closes IOPub (it does IOPub first)."""
        self._end_control_thread()
        super().close()  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped

    def _end_control_thread(self) -> None:
        control = self.control_thread
        if control is not None and control.is_alive():
            control.stop()
            control.join(timeout=30)

    def init_kernel(self) -> None:
        """Make the kernel without the settings that are wrong; it then answers every cell with what they were."""
        messages, bad = settings_check.problems(self.config, SandboxKernel, self._origin)
        section = self.config.get(settings_check.SECTION, {})
        for name in bad:
            del section[name]
        super().init_kernel()  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        found = self.kernel.settings_problems  # between settings (mounts, allow_net, skills): say where they were made
        for i, problem in enumerate(found):
            named = re.match(rf"{settings_check.SECTION}\.(\w+)", problem)
            if named:
                found[i] = f"{problem} (set in {self._origin(named.group(1))})"
        found[:0] = messages

    def _origin(self, name: str) -> str:
        """Where setting `name` was made: the command line, or the last config file that sets it."""
        if name in self.cli_config.get(settings_check.SECTION, {}):
            return "the kernel's command line: its kernelspec's argv or --SandboxKernel options"
        for path in reversed(self.loaded_config_files):
            loader = JSONFileConfigLoader if path.endswith(".json") else PyFileConfigLoader
            try:
                config = loader(os.path.basename(path), os.path.dirname(path)).load_config()
            except Exception:  # it loaded before; a file that changed since proves nothing
                continue
            if name in config.get(settings_check.SECTION, {}):
                return path
        return "the kernel's configuration"


def launch(argv: list[str] | None = None) -> None:
    """Start the kernel (the kernelspec's argv ends up here; cli/main.py has set one malloc arena first)."""
    SandboxKernelApp.launch_instance(argv=argv)

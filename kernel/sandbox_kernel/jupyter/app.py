"""The kernel process: ipykernel's application, launching a SandboxKernel."""

from __future__ import annotations

import os
import re
from typing import Any

from ipykernel.kernelapp import IPKernelApp
from jupyter_core.paths import jupyter_config_path
from traitlets import Type, Unicode
from traitlets.config.application import Application
from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader
from traitlets.utils.importstring import import_item

from sandbox_kernel.jupyter import settings_check
from sandbox_kernel.jupyter.kernel import SandboxKernel
from sandbox_kernel.jupyter.setting_sources import COMMAND_LINE, Sources, parse


class SandboxKernelApp(IPKernelApp):
    """Runs SandboxKernel; settings from the command line and sandbox_kernel_config.py/.json."""

    name = "sandbox-kernel"
    # traitlets declarations: mypy sees the trait object where IPKernelApp's annotations name its value
    kernel_class = Type(SandboxKernel, klass="ipykernel.kernelbase.Kernel").tag(config=True)  # type: ignore[assignment]
    classes = [*IPKernelApp.classes, SandboxKernel]  # noqa: RUF012 (traitlets' Application.classes)
    setting_sources = Unicode(
        "",
        help="For programs that start the kernel (the agent API, sandbox-kernel run and mcp), not a setting: JSON "
        "saying where each command-line setting was given, so that messages name it (setting_sources.py).",
    ).tag(config=True)

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
        sources = parse(self.setting_sources)
        messages, bad = settings_check.problems(self.config, SandboxKernel, lambda name: self._origin(name, sources))
        section = self.config.get(settings_check.SECTION, {})
        for name in bad:
            del section[name]
        super().init_kernel()  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        own = settings_check.own_settings(SandboxKernel)
        found = self.kernel.settings_problems  # between settings (mounts, allow_net, skills): say where they were made
        for i, problem in enumerate(found):
            named = re.match(rf"{settings_check.SECTION}\.(\w+(?:(?:, | or )\w+)*):", problem)
            if named:
                found[i] = f"{problem} ({self._origins(named.group(1), own, sources)})"
        found[:0] = messages
        found[:] = [sources.respell(problem, own) for problem in found]
        self.kernel.setting_sources = sources

    def _origins(self, listed: str, own: set[str], sources: Sources) -> str:
        """Where the settings of a problem ('mounts' or 'mounts or working_folder') were made: those that were."""
        names = [word for word in re.split(r", | or ", listed) if word in own]
        made = [name for name in names if name in self.config.get(settings_check.SECTION, {})]
        if len(names) == 1 or not made:
            return self._origin(names[0] if len(names) == 1 else "", sources)
        origins = [self._origin(name, sources) for name in made]  # a launcher's own words name the setting
        return "; ".join(
            o if name in sources.given else f"{sources.spelled(name)} {o}"
            for name, o in zip(made, origins, strict=True)
        )

    def _origin(self, name: str, sources: Sources) -> str:
        """Where setting `name` was made: as the kernel's launcher says, its command line, or the last config file
        that sets it."""
        if name in self.cli_config.get(settings_check.SECTION, {}):
            given = sources.given.get(name)
            return f"given as {given}" if given else f"set in {COMMAND_LINE}"
        for path in reversed(self.loaded_config_files):
            loader = JSONFileConfigLoader if path.endswith(".json") else PyFileConfigLoader
            try:
                config = loader(os.path.basename(path), os.path.dirname(path)).load_config()
            except Exception:  # it loaded before; a file that changed since proves nothing
                continue
            if name in config.get(settings_check.SECTION, {}):
                return f"set in {path}"
        return "set in the kernel's configuration"


def launch(argv: list[str] | None = None) -> None:
    """Start the kernel (the kernelspec's argv ends up here; cli/main.py has set one malloc arena first)."""
    SandboxKernelApp.launch_instance(argv=argv)

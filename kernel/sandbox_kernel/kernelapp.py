"""The kernel process: ipykernel's application, launching a SandboxKernel."""

from __future__ import annotations

from typing import Any, ClassVar

from ipykernel.kernelapp import IPKernelApp
from jupyter_core.paths import jupyter_config_path
from traitlets import Type
from traitlets.config import Config
from traitlets.config.application import Application
from traitlets.utils.importstring import import_item

from .kernel import SandboxKernel

CONFIG_FILE = "sandbox_kernel_config"


class ConfigError(Exception):
    """A setting that does not exist or has a wrong value."""


def unknown_settings(config: Config, kernel_class: type) -> list[str]:
    """Names of `SandboxKernel.*` settings that the kernel does not have."""
    known = set(kernel_class.class_trait_names(config=True))
    section = config.get(kernel_class.__name__, {})
    return sorted(f"{kernel_class.__name__}.{key}" for key in section if key not in known)


class SandboxKernelApp(IPKernelApp):
    """Runs SandboxKernel; settings from the command line and sandbox_kernel_config.py/.json."""

    name = "sandbox-kernel"
    kernel_class = Type(SandboxKernel, klass="ipykernel.kernelbase.Kernel").tag(config=True)
    classes: ClassVar[list[type]] = [*IPKernelApp.classes, SandboxKernel]

    def load_config_file(self, *args: Any, **kwargs: Any) -> None:
        """Read sandbox_kernel_config.{py,json} from every Jupyter config directory."""
        super().load_config_file(*args, **kwargs)
        for path in reversed(jupyter_config_path()):  # later (user) files override system ones
            Application.load_config_file(self, CONFIG_FILE, path=path)

    def init_io(self) -> None:
        """Keep the kernel process's own stdout/stderr: guest output never goes through them."""
        if self.displayhook_class:
            self.displayhook = import_item(str(self.displayhook_class))(self.session, self.iopub_socket)

    def initialize(self, argv: Any = None) -> None:
        super().initialize(argv)
        bad = unknown_settings(self.config, SandboxKernel)
        if bad:
            known = ", ".join(sorted(SandboxKernel.class_own_traits(config=True)))
            self.log.critical("Unknown setting(s): %s. SandboxKernel settings are: %s", ", ".join(bad), known)
            self.exit(2)


def launch(argv: list[str] | None = None) -> None:
    """Start the kernel (the kernelspec's argv ends up here)."""
    SandboxKernelApp.launch_instance(argv=argv)

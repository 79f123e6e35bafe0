"""The line magics ipykernel adds to IPython's (its zmqshell.KernelMagics), as they work in the sandbox.

`%clear`, `%less`/`%more` and `%man` do what ipykernel's do, through the sandbox's shell and the frontend's pager;
`%autosave` says what it set (the classic notebook's JavaScript it also sends is nothing JupyterLab runs, and the
page policy lets no script through); `%connect_info` and `%qtconsole` say why they cannot be had here.
"""

from __future__ import annotations

from IPython.core import page
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.utils import openpy


@magics_class
class IpykernelMagics(Magics):
    """ipykernel's own line magics, in the sandbox."""

    @line_magic
    def clear(self, arg_s: str) -> None:
        """Clear the terminal."""
        self.shell.system("clear")  # type: ignore[union-attr]  # a Magics' shell is set once registered

    @line_magic
    def less(self, arg_s: str) -> None:
        """Show a file through the pager. Files ending in .py are syntax-highlighted."""
        self._page_file(arg_s)

    @line_magic
    def more(self, arg_s: str) -> None:
        """Show a file through the pager. Files ending in .py are syntax-highlighted."""
        self._page_file(arg_s)

    def _page_file(self, path: str) -> None:
        if not path:
            raise UsageError("Missing filename.")
        if path.endswith(".py"):
            shown = self.shell.pycolorize(openpy.read_py_file(path, skip_encoding_cookie=False))  # type: ignore[union-attr]
        else:
            with open(path) as file:
                shown = file.read()
        page.page(shown)

    @line_magic
    def man(self, arg_s: str) -> None:
        """Find the man page for the given command and display in pager."""
        self.shell.system(f"man -P cat {arg_s}")  # type: ignore[union-attr]

    @line_magic
    def autosave(self, arg_s: str) -> None:
        """Set the autosave interval in the notebook (in seconds); 0 disables it."""
        try:
            interval = int(arg_s)
        except ValueError as e:
            raise UsageError(f"%autosave requires an integer, got {arg_s!r}") from e
        print(f"Autosaving every {interval} seconds" if interval else "Autosave disabled")

    @line_magic
    def connect_info(self, arg_s: str) -> None:
        """Where the kernel's connection information is."""
        raise UsageError(
            "%connect_info: the kernel's connection file stays on the host, outside the sandbox (its key would let "
            "code here sign requests as the frontend); on the host, `jupyter --runtime-dir` holds it"
        )

    @line_magic
    def qtconsole(self, arg_s: str) -> None:
        """Open a qtconsole connected to this kernel."""
        raise UsageError(
            "%qtconsole: the sandbox starts no processes; start `jupyter qtconsole --existing` on the host"
        )

"""sandbox-kernel: a Jupyter kernel that runs Python in a Deno + Pyodide sandbox."""

__version__ = "0.1.0"

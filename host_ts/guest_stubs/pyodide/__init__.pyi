"""Pyodide's `pyodide` package (314.0.7), as far as the guest glue uses it."""

__version__: str

"""Guest side of sandbox-kernel: runs inside Pyodide and talks to the Deno worker."""

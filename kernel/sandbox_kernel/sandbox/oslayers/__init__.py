"""OS confinement of the Deno process: the second wall behind Deno's own permission checks.

The modules here run inside the launcher (`launch.py`), a short-lived Python that applies the
layers to itself and then becomes Deno with exec; they import nothing but the standard library.
"""

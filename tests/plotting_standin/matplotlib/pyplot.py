"""Stand-in pyplot: figures through the configured backend, as matplotlib's pyplot does."""

import importlib

import matplotlib
from matplotlib._pylab_helpers import Gcf
from matplotlib.figure import Figure

_backend = None


def switch_backend(name):
    global _backend
    module = name.removeprefix("module://") if name.startswith("module://") else "matplotlib.backends.backend_agg"
    _backend = importlib.import_module(module)
    matplotlib.rcParams["backend"] = name


def _backend_module():
    if _backend is None:
        switch_backend(matplotlib.rcParams["backend"])
    return _backend


def figure():
    num = max(Gcf.figs, default=0) + 1
    manager = _backend_module().new_figure_manager_given_figure(num, Figure())
    Gcf.set_active(manager)
    return manager.canvas.figure


def gcf():
    manager = Gcf.get_active()
    return manager.canvas.figure if manager else figure()


def draw_if_interactive():
    pass


def plot(*values):
    gcf().plot(*values)
    draw_if_interactive()
    return [values]


def show(*args, **kwargs):
    return getattr(_backend_module(), "show", lambda *a, **k: None)(*args, **kwargs)


def close(which="all"):
    Gcf.destroy_all()

"""Stand-in matplotlib (tests only): rcParams, interactive mode and the backend name."""

import os

__version__ = "3.8.0"
__version_info__ = (3, 8, 0)  # before 3.9: IPython picks backends itself rather than asking matplotlib


class RcParams(dict):
    def _get(self, key):
        return dict.__getitem__(self, key)


rcParams = RcParams(
    {
        "backend": os.environ.get("MPLBACKEND", "agg"),
        "interactive": False,
        "figure.figsize": (6.4, 4.8),
        "figure.dpi": 100.0,
        "figure.facecolor": "white",
        "figure.edgecolor": "white",
        "font.size": 10,
        "figure.subplot.bottom": 0.11,
    }
)
rcParamsOrig = RcParams(rcParams)


def is_interactive():
    return rcParams["interactive"]


def interactive(b):
    rcParams["interactive"] = bool(b)


def get_backend(auto_select=True):
    return rcParams["backend"]


def use(backend, force=True):
    rcParams["backend"] = backend

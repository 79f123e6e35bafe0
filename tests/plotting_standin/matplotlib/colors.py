"""Stand-in matplotlib.colors: named colours as RGBA."""


def to_rgba(c, alpha=None):
    if isinstance(c, str):
        return {"white": (1.0, 1.0, 1.0, 1.0), "none": (0.0, 0.0, 0.0, 0.0)}.get(c, (0.0, 0.0, 0.0, 1.0))
    return tuple(c)


def to_rgba_array(c):
    raise NotImplementedError("the stand-in has no arrays (no numpy here)")

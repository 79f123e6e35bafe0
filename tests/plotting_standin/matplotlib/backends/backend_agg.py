"""Stand-in Agg backend: a canvas that writes a small real PNG (one row per plotted line) or an SVG."""

import struct
import zlib


def _png(width, height):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\xff\xff" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class FigureManager:
    def __init__(self, canvas, num):
        self.canvas = canvas
        self.num = num


class FigureCanvasAgg:
    def __init__(self, figure):
        self.figure = figure
        figure.canvas = self

    def print_figure(self, out, format="png", **kwargs):
        lines = len(self.figure.lines)
        if format == "svg":
            out.write(f'<svg xmlns="http://www.w3.org/2000/svg"><text>{lines} lines</text></svg>'.encode())
        else:
            out.write(_png(16, max(1, lines)))


def new_figure_manager_given_figure(num, figure):
    return FigureManager(FigureCanvasAgg(figure), num)

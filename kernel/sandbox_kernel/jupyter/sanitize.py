"""Neutralises what a cell displays before it leaves the kernel: nothing it shows may act in the browser.

JupyterLab runs scripts in outputs made during the running session, with the rights of the user's
Jupyter server. So mime types that execute are dropped, HTML, SVG and Markdown are cleaned with nh3
(scripts, event handlers, javascript: URLs, forms, frames and styles that reach outside the output
are removed), and no URL in them may reach another host (it would carry the sandbox's data out):
every URL is judged as the browser parses it (url_reach), images keep only data: URLs, same-origin
relative URLs and http(s) hosts in allow_net, links the same (so a link elsewhere loses its href), and
SVG references stay inside the document. Vega and Plotly specs that name a URL on another host are
dropped. Safe renderers pass unchanged.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox_kernel.jupyter.output import guest_text
from sandbox_kernel.jupyter.url_reach import Reach, Target, allowed_host, browser_trimmed, target

if TYPE_CHECKING:
    import nh3
    from markdown_it import MarkdownIt

# Rendered by JupyterLab without running anything the guest wrote (text, images, data viewers).
PASS = frozenset(
    {
        "text/plain",
        "text/latex",  # MathJax, with its safe handler
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/bmp",
        "application/json",
        "application/geo+json",
        "application/vnd.dataresource+json",
        "application/vnd.plotly.v1+json",
        "application/vnd.jupyter.widget-view+json",  # names a widget model: its state is checked (widget_guard)
        *(f"application/vnd.vega.v{v}+json" for v in (3, 4, 5)),
        *(f"application/vnd.vegalite.v{v}+json" for v in (1, 2, 3, 4, 5)),
    }
)
# JSON specs whose renderers fetch the URLs they name (data, images, map styles).
URL_SPEC_TYPES = frozenset(m for m in PASS if "plotly" in m or "vega" in m)
STRING_TYPES = frozenset({"text/plain", "text/latex", "text/html", "text/markdown", "image/svg+xml"})
IMAGE_TYPES = frozenset(m for m in PASS if m.startswith("image/"))

SVG_TAGS = frozenset(
    """svg g defs symbol use path rect circle ellipse line polyline polygon text tspan textPath title desc
    clipPath mask pattern marker linearGradient radialGradient stop image""".split()
)
COMMON_ATTRIBUTES = frozenset({"class", "style", "title", "lang", "dir", "align", "valign", "width", "height"})
# Ours, on top of nh3's own defaults (html_tags, html_attributes).
OWN_HTML_ATTRIBUTES: dict[str, set[str]] = {
    "*": set(COMMON_ATTRIBUTES),
    "a": {"href", "hreflang", "target"},
    "img": {"src", "alt", "width", "height", "align"},
    "table": {"border", "cellpadding", "cellspacing", "summary", "align"},
    "td": {"colspan", "rowspan", "headers", "align", "nowrap"},
    "th": {"colspan", "rowspan", "headers", "scope", "align", "nowrap"},
    "ol": {"start", "type", "reversed"},
    "li": {"value"},
    "details": {"open"},
    "font": {"color", "size", "face"},
}


def html_tags() -> set[str]:
    """The HTML elements kept: nh3's defaults, less image maps, with a few plain ones more."""
    import nh3  # on first use, like the cleaners: a kernel that displays no HTML never loads it

    return set(nh3.ALLOWED_TAGS) - {"area", "map"} | {"caption", "tfoot", "font"}


def html_attributes() -> dict[str, set[str]]:
    """The HTML attributes kept, per element ('*': on any): nh3's defaults with ours (OWN_HTML_ATTRIBUTES)."""
    import nh3

    return {**{tag: set(attrs) for tag, attrs in nh3.ALLOWED_ATTRIBUTES.items()}, **OWN_HTML_ATTRIBUTES}


SVG_ATTRIBUTES: dict[str, set[str]] = {
    "*": set(COMMON_ATTRIBUTES)
    | set(
        """id x y x1 y1 x2 y2 cx cy r rx ry dx dy d points transform viewBox preserveAspectRatio version
        fill fill-opacity fill-rule stroke stroke-width stroke-opacity stroke-linecap stroke-linejoin
        stroke-dasharray stroke-dashoffset stroke-miterlimit opacity clip-path clip-rule mask font-family
        font-size font-weight font-style text-anchor dominant-baseline alignment-baseline letter-spacing
        offset stop-color stop-opacity gradientUnits gradientTransform patternUnits patternTransform
        markerWidth markerHeight markerUnits orient refX refY marker-start marker-mid marker-end
        href xlink:href xmlns visibility display""".split()
    )
}
# CSS properties that cannot fetch anything or cover the page (no url(), no position/z-index).
STYLE_PROPERTIES = frozenset(
    """color background-color font font-family font-size font-style font-weight font-variant text-align
    text-decoration text-indent text-transform vertical-align white-space word-break word-wrap
    overflow-wrap letter-spacing line-height border border-top border-right border-bottom border-left
    border-color border-style border-width border-collapse border-spacing border-radius padding
    padding-top padding-right padding-bottom padding-left margin margin-top margin-right margin-bottom
    margin-left width height min-width min-height max-width max-height display table-layout caption-side
    empty-cells list-style-type opacity overflow overflow-x overflow-y float clear visibility
    fill fill-opacity fill-rule stroke stroke-width stroke-opacity stroke-linecap stroke-linejoin
    stroke-dasharray stroke-dashoffset stroke-miterlimit clip-rule stop-color stop-opacity text-anchor
    dominant-baseline""".split()
)
WEB_SCHEMES = frozenset({"http", "https"})
URL_SCHEMES = WEB_SCHEMES | {"data"}  # for nh3's own check; data: only for images (see _url_allowed)
# Attributes whose value is a URL in HTML or SVG. Those _url_allowed has no rule for are removed.
URL_ATTRIBUTES = frozenset(
    """href xlink:href src srcset cite action formaction poster background longdesc usemap lowsrc dynsrc data
    codebase classid archive profile manifest icon ping attributionsrc imagesrcset xml:base""".split()
)
IMAGE_SOURCES = frozenset({("img", "src"), ("image", "href"), ("image", "xlink:href")})
LINKS = frozenset({("a", "href"), ("blockquote", "cite"), ("q", "cite"), ("del", "cite"), ("ins", "cite")})
DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp|bmp);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)
CSS_URL = re.compile(r"url\s*\(", re.IGNORECASE)
LOCAL_URL = re.compile(r"url\s*\(\s*['\"]?#[\w.:-]+['\"]?\s*\)", re.IGNORECASE)
# Markdown that JupyterLab (marked, with GitHub's extensions) may render as it is has nothing that can
# become a URL: no raw HTML or autolink (<), entity, link, image or reference definition (](, ][, ]:),
# bare URL (://, www.), e-mail address, or URL scheme. Matched with whitespace and backslashes removed.
MARKDOWN_RISKS = re.compile(
    r"<|&(#?\w+);|!\[|\][(\[:]|[/\\]{2}|www\.|[\w.+-]@[\w-]|(javascript|vbscript|data|file|mailto|xmpp):",
    re.IGNORECASE,
)
# Where a URL that names a host may start inside a longer string (a Plotly label's <a href>, a quoted
# string in a Vega expression): two slashes or backslashes in any mix (any scheme, or none), or a special
# scheme, which needs no slashes (`http:host`). A candidate ends at a space, quote or angle bracket.
URL_START = re.compile(r"[/\\]{2}|(?:https?|wss?|ftp|file):", re.IGNORECASE)
DOUBLE_SLASH = re.compile(r"[/\\]{2}")
URL_END = re.compile(r"[\s'\"`<>]")
# MathJax, which typesets math in JupyterLab's HTML, Markdown and LaTeX output, makes links, CSS (so
# `\style{cursor: url(...)}` fetches), classes, ids and attributes of these commands; and loads extensions.
MATHJAX_ACTIVE = re.compile(r"\\(?=(?:href|style|class|cssId|data|mmlToken|require|url)(?![A-Za-z]))")
TAG = re.compile(r"<[^>]*>")
TEX_COMMAND = re.compile(r"\\(?=[A-Za-z<])")
WALKED = frozenset({str, dict, list})  # JSON values (as json.loads makes them) that can hold a string
MAX_SPEC_NODES = 2_000_000  # values in one JSON spec checked for URLs; a larger spec is not sent
NOT_ALLOWED = "not in SandboxKernel.allow_net (the browser would fetch it, and a URL can carry the sandbox's data out)"


def inert_math(text: str) -> str:
    """`text` with MathJax's active commands (MATHJAX_ACTIVE) made plain: `\\style` becomes `\\ style`, a
    space and the word, in math and anywhere else."""
    return MATHJAX_ACTIVE.sub(r"\\ ", text)


@dataclass
class CleanBundle:
    """A mimebundle with active content removed, and what was dropped (for a notice)."""

    data: dict[str, Any]
    metadata: dict[str, Any]
    dropped: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # why a dropped type was dropped, when not for code


class OutputSanitizer:
    """Cleans mimebundles; `trusted` passes everything unchanged (SandboxKernel.trust_output)."""

    def __init__(self, trusted: bool = False, image_hosts: Iterable[str] = ()) -> None:
        self.trusted = trusted
        self.allowed_hosts = frozenset(filter(None, map(allowed_host, image_hosts)))  # allow_net's hosts

    # The cleaners and the Markdown renderer are made on first use: nh3 and markdown-it are loaded only by a kernel
    # that displays HTML, SVG or Markdown (~2 MiB and ~45 ms of every kernel's start otherwise, measured).
    @functools.cached_property
    def _markdown(self) -> MarkdownIt:
        from markdown_it import MarkdownIt

        return MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")

    @functools.cached_property
    def _html(self) -> nh3.Cleaner:
        import nh3

        return nh3.Cleaner(
            tags=html_tags(),
            clean_content_tags={"script", "style"},
            attributes=html_attributes(),
            attribute_filter=self._attribute,
            url_schemes=set(URL_SCHEMES),
            link_rel="noopener noreferrer nofollow",
            filter_style_properties=set(STYLE_PROPERTIES),
            strip_comments=True,
        )

    @functools.cached_property
    def _svg(self) -> nh3.Cleaner:
        import nh3

        return nh3.Cleaner(
            tags=set(SVG_TAGS),
            clean_content_tags={"script", "style", "foreignObject"},
            attributes=SVG_ATTRIBUTES,
            attribute_filter=self._attribute,
            url_schemes=set(URL_SCHEMES),
            link_rel=None,
            filter_style_properties=set(STYLE_PROPERTIES),
            strip_comments=True,
        )

    # ---- URLs ------------------------------------------------------------------------------
    def _on_allowed_host(self, where: Target) -> bool:
        return where.reach is Reach.HOST and where.scheme in WEB_SCHEMES and where.host in self.allowed_hosts

    def image_allowed(self, url: str) -> bool:
        """data: images, same-origin URLs, or http(s) on a host in allow_net (no other fetch leaves the page)."""
        if DATA_IMAGE.fullmatch(browser_trimmed(url)):
            return True
        return self.link_allowed(url)

    def link_allowed(self, url: str) -> bool:
        """Links stay in the document, on the Jupyter server or on a host in allow_net."""
        where = target(url)
        return where.reach in (Reach.SAME_DOCUMENT, Reach.SAME_ORIGIN) or self._on_allowed_host(where)

    def _url_allowed(self, tag: str, attribute: str, value: str) -> bool:
        if (tag, attribute) in IMAGE_SOURCES:
            return self.image_allowed(value)
        if (tag, attribute) in LINKS:
            return self.link_allowed(value)
        if attribute in ("href", "xlink:href"):  # SVG <use>, gradients, patterns, text paths
            return target(value).reach is Reach.SAME_DOCUMENT
        return False  # srcset, poster, background, ...: no rule, so never kept

    def spec_problem(self, spec: Any) -> str | None:
        """Why the JSON `spec` (Vega, Plotly) may not go to the browser, which fetches the URLs it names:
        a string names a host outside allow_net, or the spec is too large to check; None when it may."""
        if isinstance(spec, dict) and "$schema" in spec:  # names the spec's version: vega-embed fetches nothing
            spec = {key: value for key, value in spec.items() if key != "$schema"}
        todo, seen = [spec], 0
        while todo:
            value = todo.pop()
            kind = type(value)
            if kind is str:
                problem = self._string_problem(value)
                if problem is not None:
                    return problem
            elif kind is dict or kind is list:
                seen += len(value)
                if seen > MAX_SPEC_NODES:
                    return f"it holds more than {MAX_SPEC_NODES:,} values, too many to check for URLs to other hosts"
                items = [*value.keys(), *value.values()] if kind is dict else value
                todo.extend([item for item in items if type(item) in WALKED])  # numbers need no look
        return None

    def _string_problem(self, text: str) -> str | None:
        """Why `text`, or a URL inside it, may not reach the browser (HTML entities decoded too, for Plotly's
        labels); else None."""
        for variant in (text, html.unescape(text)) if "&" in text else (text,):
            trimmed = browser_trimmed(variant)
            starts = [m.start() for m in URL_START.finditer(trimmed)]
            if not starts:
                continue  # no scheme with a host and no //: a path on the page, or no URL at all
            for candidate in [variant] + [URL_END.split(trimmed[start:], 1)[0] for start in starts]:
                where = target(candidate)
                if where.reach is Reach.HOST and not self._on_allowed_host(where):
                    return f"it names a URL on '{guest_text(where.host, 100)}', a host {NOT_ALLOWED}"
                if where.reach is Reach.INVALID and DOUBLE_SLASH.search(browser_trimmed(candidate)):
                    # WHATWG refuses it, Chromium may not (`http://a b/` reaches the host `a%20b`).
                    return f"it names '{guest_text(candidate, 60)}', which a browser may read as a URL on a host {NOT_ALLOWED}"
        return None

    # ---- attributes ------------------------------------------------------------------------
    def _attribute(self, tag: str, attribute: str, value: str) -> str | None:
        """nh3 calls this with the value as the browser will see it (entities decoded)."""
        if attribute == "style" or CSS_URL.search(value):
            # url() may only point inside the document (SVG gradients, clip paths).
            if CSS_URL.search(LOCAL_URL.sub("", value)) or "expression" in value.lower() or "\\" in value:
                return None
        if attribute in URL_ATTRIBUTES:
            return value if self._url_allowed(tag, attribute, value) else None
        return value

    # ---- mime types ------------------------------------------------------------------------
    def html(self, text: str) -> str:
        cleaned = inert_math(self._html.clean(text))
        if MATHJAX_ACTIVE.search(html.unescape(TAG.sub("", cleaned))):
            # MathJax joins text across <wbr> (`\sty<wbr>le` is `\style`): no TeX command survives here.
            cleaned = TEX_COMMAND.sub(r"\\ ", cleaned)
        return cleaned

    def svg(self, text: str) -> str:
        cleaned = self._svg.clean(text)
        # Serialised as HTML: make it a standalone SVG document again (namespace, plain href).
        cleaned = re.sub(r"\sxlink:href=", " href=", cleaned)
        if cleaned.lstrip().startswith("<svg") and "xmlns=" not in cleaned.split(">", 1)[0]:
            cleaned = cleaned.replace("<svg", '<svg xmlns="http://www.w3.org/2000/svg"', 1)
        return cleaned

    def markdown(self, text: str) -> tuple[str, str]:
        """('text/markdown', text) when it is plain Markdown, else ('text/html', cleaned rendering)."""
        if not MARKDOWN_RISKS.search(re.sub(r"[\s\\]", "", text)):
            return "text/markdown", inert_math(text)
        return "text/html", self.html(self._markdown.render(text))

    def bundle(self, data: dict[str, Any], metadata: dict[str, Any] | None = None) -> CleanBundle:
        """The bundle as it may go to the frontend."""
        metadata = dict(metadata or {})
        if self.trusted:
            return CleanBundle(dict(data), metadata)
        clean: dict[str, Any] = {}
        dropped: list[str] = []
        reasons: dict[str, str] = {}
        for mime, value in data.items():
            if mime in STRING_TYPES or mime in IMAGE_TYPES:
                if isinstance(value, list) and all(isinstance(v, str) for v in value):
                    value = "".join(value)
                if not isinstance(value, str):
                    dropped.append(mime)
                    continue
            if mime in URL_SPEC_TYPES and (problem := self.spec_problem(value)) is not None:
                dropped.append(mime)
                reasons[mime] = problem
            elif mime == "text/latex":
                clean[mime] = inert_math(value)
            elif mime in PASS:
                clean[mime] = value
            elif mime == "text/html":
                clean["text/html"] = self.html(value)
            elif mime == "image/svg+xml":
                clean[mime] = self.svg(value)
            elif mime == "text/markdown":
                kind, text = self.markdown(value)
                if kind == "text/html" and "text/html" in data:
                    continue  # the bundle's own HTML (cleaned above or below) says the same
                clean[kind] = text
            else:
                dropped.append(mime)
        for mime in list(metadata):
            if "/" in mime and mime not in clean:
                del metadata[mime]
        return CleanBundle(clean, metadata, dropped, reasons)

"""Neutralises what a cell displays before it leaves the kernel: nothing it shows may act in the browser.

JupyterLab runs scripts in outputs made during the running session, with the rights of the user's
Jupyter server. So mime types that execute are dropped, HTML, SVG and Markdown are cleaned with nh3
(scripts, event handlers, javascript: URLs, forms, frames and styles that reach outside the output
are removed), and images may load only from data: URLs, relative paths or hosts in allow_net (an
image URL elsewhere would carry the sandbox's data out). Safe renderers pass unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

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
        *(f"application/vnd.vega.v{v}+json" for v in (3, 4, 5)),
        *(f"application/vnd.vegalite.v{v}+json" for v in (1, 2, 3, 4, 5)),
    }
)
STRING_TYPES = frozenset({"text/plain", "text/latex", "text/html", "text/markdown", "image/svg+xml"})
IMAGE_TYPES = frozenset(m for m in PASS if m.startswith("image/"))

HTML_TAGS = nh3.ALLOWED_TAGS - {"area", "map"} | {"caption", "tfoot", "font"}
SVG_TAGS = frozenset(
    """svg g defs symbol use path rect circle ellipse line polyline polygon text tspan textPath title desc
    clipPath mask pattern marker linearGradient radialGradient stop image""".split()
)
COMMON_ATTRIBUTES = frozenset({"class", "style", "title", "lang", "dir", "align", "valign", "width", "height"})
HTML_ATTRIBUTES: dict[str, set[str]] = {
    **{tag: set(attrs) for tag, attrs in nh3.ALLOWED_ATTRIBUTES.items()},
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
SAFE_LINK_SCHEMES = frozenset({"http", "https", "mailto"})
URL_SCHEMES = SAFE_LINK_SCHEMES | {"data"}  # data: only for images (see _attribute)
DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp|bmp);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)
CSS_URL = re.compile(r"url\s*\(", re.IGNORECASE)
LOCAL_URL = re.compile(r"url\s*\(\s*['\"]?#[\w.:-]+['\"]?\s*\)", re.IGNORECASE)
# Markdown that JupyterLab can render as it is: no raw HTML, entities, images or dangerous URLs.
MARKDOWN_RISKS = re.compile(r"<|&(#?\w+);|!\[|(javascript|vbscript|data|file):", re.IGNORECASE)


@dataclass
class CleanBundle:
    """A mimebundle with active content removed, and what was dropped (for a notice)."""

    data: dict[str, Any]
    metadata: dict[str, Any]
    dropped: list[str] = field(default_factory=list)


class OutputSanitizer:
    """Cleans mimebundles; `trusted` passes everything unchanged (SandboxKernel.trust_output)."""

    def __init__(self, trusted: bool = False, image_hosts: Iterable[str] = ()) -> None:
        self.trusted = trusted
        self.image_hosts = frozenset(h.lower() for h in image_hosts)
        self._markdown = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")
        self._html = nh3.Cleaner(
            tags=set(HTML_TAGS),
            clean_content_tags={"script", "style"},
            attributes=HTML_ATTRIBUTES,
            attribute_filter=self._attribute,
            url_schemes=set(URL_SCHEMES),
            link_rel="noopener noreferrer nofollow",
            filter_style_properties=set(STYLE_PROPERTIES),
            strip_comments=True,
        )
        self._svg = nh3.Cleaner(
            tags=set(SVG_TAGS),
            clean_content_tags={"script", "style", "foreignObject"},
            attributes=SVG_ATTRIBUTES,
            attribute_filter=self._attribute,
            url_schemes=set(URL_SCHEMES),
            link_rel=None,
            filter_style_properties=set(STYLE_PROPERTIES),
            strip_comments=True,
        )

    # ---- attributes ------------------------------------------------------------------------
    def _image_source(self, value: str) -> bool:
        """data: images, relative paths, or http(s) hosts in allow_net (no other fetch leaves the page)."""
        if DATA_IMAGE.fullmatch(value.strip()):
            return True
        parts = urlsplit(value.strip())
        if not parts.scheme and not parts.netloc:
            return True
        return parts.scheme in ("http", "https") and (parts.hostname or "").lower() in self.image_hosts

    def _attribute(self, tag: str, attribute: str, value: str) -> str | None:
        if attribute == "style" or CSS_URL.search(value):
            # url() may only point inside the document (SVG gradients, clip paths).
            if CSS_URL.search(LOCAL_URL.sub("", value)) or "expression" in value.lower() or "\\" in value:
                return None
        if tag == "img" and attribute == "src":
            return value if self._image_source(value) else None
        if tag == "a" and attribute == "href":
            scheme = urlsplit(value.strip()).scheme.lower()
            return value if not scheme or scheme in SAFE_LINK_SCHEMES else None
        if attribute in ("href", "xlink:href") and tag != "a":
            return value if value.strip().startswith("#") else None  # <use>, gradients: same document only
        if tag == "image" and attribute in ("href", "xlink:href"):
            return value if DATA_IMAGE.fullmatch(value.strip()) else None
        return value

    # ---- mime types ------------------------------------------------------------------------
    def html(self, text: str) -> str:
        return self._html.clean(text)

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
            return "text/markdown", text
        return "text/html", self.html(self._markdown.render(text))

    def bundle(self, data: dict[str, Any], metadata: dict[str, Any] | None = None) -> CleanBundle:
        """The bundle as it may go to the frontend."""
        metadata = dict(metadata or {})
        if self.trusted:
            return CleanBundle(dict(data), metadata)
        clean: dict[str, Any] = {}
        dropped: list[str] = []
        for mime, value in data.items():
            if mime in STRING_TYPES or mime in IMAGE_TYPES:
                if isinstance(value, list) and all(isinstance(v, str) for v in value):
                    value = "".join(value)
                if not isinstance(value, str):
                    dropped.append(mime)
                    continue
            if mime in PASS:
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
        return CleanBundle(clean, metadata, dropped)

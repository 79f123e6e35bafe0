"""URLs as the guest might write them, with where a browser goes with each (WHATWG URL rules).

Shared by the unit tests (the judge, and Deno's `new URL()` as a second opinion) and the browser test
(Chromium's own parser). Values are as the URL parser receives them: after HTML entity decoding.
"""

from __future__ import annotations

from typing import NamedTuple

from sandbox_kernel.jupyter.url_reach import PAGE_HOSTS, PAGES, Reach, target

EVIL = "evil.example"


class Case(NamedTuple):
    url: str
    reach: Reach
    scheme: str = ""
    host: str = ""


def on(host: str, scheme: str = "http") -> tuple[Reach, str, str]:
    return Reach.HOST, scheme, host


URL_CASES: list[Case] = [
    # The payloads: a relative path to urllib, another host to the browser.
    Case("/\\evil.example/x?d=SECRET", *on(EVIL)),
    Case(" /\\evil.example/x?d=SECRET", *on(EVIL)),
    Case("\t\n /\\evil.example/x", *on(EVIL)),
    Case("\\/evil.example/x", *on(EVIL)),
    Case("\\\\evil.example/x", *on(EVIL)),
    Case("//evil.example/x", *on(EVIL)),
    Case("///evil.example/x", *on(EVIL)),
    Case("/\\/\\evil.example/x", *on(EVIL)),
    Case("/\t/evil.example/x", *on(EVIL)),
    Case("/\n/evil.example/x", *on(EVIL)),
    Case("/\r\n\\evil.example/x", *on(EVIL)),
    Case("\x00\x1f //evil.example/x\x01 ", *on(EVIL)),
    # Schemes: tabs and newlines inside, case, slashes and backslashes in any mix, none at all.
    Case("h\tt\ntp://evil.example/", *on(EVIL)),
    Case("HTTP://EVIL.EXAMPLE/", *on(EVIL)),
    Case("http:/\\evil.example/", *on(EVIL)),
    Case("http:\\\\evil.example/", *on(EVIL)),
    Case("http:///evil.example/", *on(EVIL)),
    Case("http:evil.example/x", *on(EVIL)),  # a host when the page is https, a path when it is http
    Case("https:evil.example/x", *on(EVIL, "https")),
    # Hosts: userinfo, a backslash ending the authority, trailing dot, percent-encoding, IDNA, IPv4 forms.
    Case("http://user:pw@evil.example/", *on(EVIL)),
    Case("http://images.example.org@evil.example/", *on(EVIL)),
    Case("http://evil.example\\@images.example.org/", *on(EVIL)),
    Case("http://evil.example./x", *on(EVIL)),
    Case("http://EVIL.example:8080/x", *on(EVIL)),
    Case("http://%65vil.example/", *on(EVIL)),
    Case("http://\uff45vil.example/", *on(EVIL)),  # fullwidth e
    Case("http://\u2603.example/", *on("xn--n3h.example")),
    Case("http://0x7f.1/", *on("127.0.0.1")),
    Case("http://2130706433/", *on("127.0.0.1")),
    Case("http://0177.0.0.1/", *on("127.0.0.1")),
    Case("http://127.1/", *on("127.0.0.1")),
    Case("http://[::1]:8/", *on("[::1]")),
    Case("//images.example.org/a.png", *on("images.example.org")),
    Case("ftp://evil.example/", *on(EVIL, "ftp")),
    Case("wss://evil.example/", *on(EVIL, "wss")),
    Case("file://evil.example/share", *on(EVIL, "file")),
    # Relative: the Jupyter server that serves the page.
    Case("?q=1", Reach.SAME_ORIGIN),
    Case("./x.png", Reach.SAME_ORIGIN),
    Case("figures/plot.png", Reach.SAME_ORIGIN),
    Case("/files/a%20b.png", Reach.SAME_ORIGIN),
    Case("../../../../x.png", Reach.SAME_ORIGIN),
    Case("/.//evil.example/x", Reach.SAME_ORIGIN),  # the path becomes //evil.example/x, on the page's host
    Case("\u00a0//evil.example/x", Reach.SAME_ORIGIN),  # no-break space is not stripped
    Case("\ufeff//evil.example/x", Reach.SAME_ORIGIN),
    Case("#section", Reach.SAME_DOCUMENT),
    Case(" \t#section", Reach.SAME_DOCUMENT),
    # Schemes without a host.
    Case("javascript:alert(1)", Reach.NO_HOST, "javascript"),
    Case(" java\tscript:alert(1)", Reach.NO_HOST, "javascript"),
    Case("mailto:a@evil.example", Reach.NO_HOST, "mailto"),
    Case("data:image/png;base64,iVBORw0KGgo=", Reach.NO_HOST, "data"),
    Case("data:image/svg+xml,<svg/>", Reach.NO_HOST, "data"),
    Case("blob:http://evil.example/1", Reach.NO_HOST, "blob"),
    Case("file:///etc/passwd", Reach.NO_HOST, "file"),
    Case("x:Q", Reach.NO_HOST, "x"),
    # Nothing the browser can parse: nothing fetched.
    Case("http://", Reach.INVALID),
    Case("//", Reach.INVALID),
    Case("http://[::1/", Reach.INVALID),
    Case("http://evil example/", Reach.INVALID),
    Case("//evil.example\x7f/", Reach.INVALID),
]

# Where another browser's parser differs from the WHATWG standard (and so from the judge), and why the
# sanitiser's decision holds for it anyway.
CHROMIUM_DIFFERS = {
    "http://evil example/": "Chromium keeps a space in a host as %20; WHATWG (and the judge) call the URL invalid, "
    "and the sanitiser keeps only URLs that stay on the page or go to allow_net",
}
DENO_DIFFERS = {
    "///evil.example/x": "Deno (rust-url) refuses it; WHATWG, ada and Chromium take evil.example as its host",
}

# (attribute value as written in HTML, the value the browser's HTML parser hands to the URL parser)
ENTITY_CASES: list[tuple[str, str]] = [
    ("&#x2F;&#x5C;evil.example/x", "/\\evil.example/x"),
    ("&#47;&#92evil.example/x", "/\\evil.example/x"),
    ("/&bsol;evil.example/x", "/\\evil.example/x"),
    ("&sol;&sol;evil.example/x", "//evil.example/x"),
    ("/&Tab;/evil.example/x", "/\t/evil.example/x"),
    ("/&NewLine;/evil.example/x", "/\n/evil.example/x"),
    ("&#x09;//evil.example/x", "\t//evil.example/x"),
    ("&#32;/\\evil.example/x", " /\\evil.example/x"),
    ("&#104;ttp&colon;//evil.example/x", "http://evil.example/x"),
    ("&amp;x", "&x"),
    ("&#0;//evil.example/x", "\ufffd//evil.example/x"),
]


def verdict_from_parses(parsed: list[tuple[str, str] | None]) -> tuple[bool, str, str]:
    """(leaves the page, scheme, host) from a browser's (protocol, hostname) of one URL on each of PAGES;
    None for a parse failure. The oracle the judge is compared with."""
    if any(p is None for p in parsed):
        return False, "", ""
    assert len(parsed) == len(PAGES)
    own = [(proto, host) for (proto, host), page in zip(parsed, PAGE_HOSTS, strict=True) if host != page]
    if not own or not own[0][1]:
        return False, "", ""
    proto, host = own[0]
    return True, proto[:-1], host[:-1] if host.endswith(".") else host


def judge_says(url: str) -> tuple[bool, str, str]:
    """The judge's verdict in verdict_from_parses' terms."""
    where = target(url)
    return (True, where.scheme, where.host) if where.reach is Reach.HOST else (False, "", "")

"""Where a URL in the sandbox's output takes the browser, judged as the browser parses it.

Browsers parse URLs by the WHATWG URL Standard, not by RFC 3986 as Python's urllib does: they drop
leading and trailing C0 controls and spaces, remove tabs and newlines anywhere, read backslashes as
slashes in http(s) URLs, take `http:host` as a host when the page is https, and so on; `/\\evil.example/x`
is a relative path to urllib and `https://evil.example/x` to a browser. So the parsing is done by
ada-url (the WHATWG parser inside Node.js), on the value as the browser sees it: HTML attribute
values after entity decoding (nh3 hands them over decoded).

A relative URL is told from an absolute one by resolving it against two page addresses that differ in
scheme and host (the notebook page may be served over http or https): only what keeps each page's host
under both is relative.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

# Two stand-ins for the notebook page's address; .invalid names never resolve (RFC 2606).
PAGES = ("http://page-one.invalid/lab/tree/notebook.ipynb", "https://page-two.invalid/lab/tree/notebook.ipynb")
PAGE_HOSTS = ("page-one.invalid", "page-two.invalid")
# What the URL parser drops before anything else (WHATWG URL parsing, first steps).
_EDGES = "".join(map(chr, range(0x21)))
_TAB_OR_NEWLINE = re.compile("[\t\n\r]")


class Reach(enum.Enum):
    """Where the browser goes with a URL."""

    SAME_DOCUMENT = "same document"  # '#fragment': nothing is fetched
    SAME_ORIGIN = "same origin"  # a relative URL: the Jupyter server that serves the page
    HOST = "host"  # a URL that names its own host (http, https, ftp, ws, file://host, ...)
    NO_HOST = "no host"  # a scheme without a host: data:, mailto:, javascript:, blob:, tel:, ...
    INVALID = "invalid"  # WHATWG refuses it (Chromium takes a few, e.g. `http://a b/`): the sanitiser keeps none


@dataclass(frozen=True)
class Target:
    """What a URL points at: its reach, its scheme (without ':') and its host (see normal_host)."""

    reach: Reach
    scheme: str = ""
    host: str = ""


def browser_trimmed(url: str) -> str:
    """The input as the URL parser starts on it: no C0 controls or spaces at the ends, no tab or newline."""
    return _TAB_OR_NEWLINE.sub("", url.strip(_EDGES))


def normal_host(host: str) -> str:
    """A parsed host as a name to compare: ada gives it in lower case, IDNA (punycode) and with IPv4 in
    dotted decimal; one trailing dot goes too, since `evil.example.` reaches the host `evil.example`."""
    return host[:-1] if host.endswith(".") and not host.endswith("..") else host


def allowed_host(entry: str) -> str:
    """An allow_net host (name, IPv4 or IPv6 without brackets) parsed as a URL's host, for comparison with
    Target.host; '' when it cannot be a host."""
    import ada_url  # on first use: most kernels never check a URL

    if ":" in entry and not entry.startswith("["):
        entry = f"[{entry}]"
    try:
        return normal_host(ada_url.URL(f"http://{entry}/").hostname)
    except ValueError:
        return ""


def target(url: str) -> Target:
    """Where the browser goes with `url`, found on a page of the notebook server (see the module doc)."""
    import ada_url

    if browser_trimmed(url).startswith("#"):
        return Target(Reach.SAME_DOCUMENT)
    try:
        parsed = [ada_url.URL(url, page) for page in PAGES]
    except ValueError:
        return Target(Reach.INVALID)
    from_page = [u.hostname == host for u, host in zip(parsed, PAGE_HOSTS, strict=True)]
    if all(from_page):
        return Target(Reach.SAME_ORIGIN)
    own = parsed[from_page.index(False)]  # e.g. `http:evil` is relative on an http page only
    scheme = own.protocol[:-1]
    if not own.hostname:
        return Target(Reach.NO_HOST, scheme)
    return Target(Reach.HOST, scheme, normal_host(own.hostname))

"""The URL judge: where the browser goes with a URL in the sandbox's output (WHATWG URL rules)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import nh3
import pytest

from sandbox_kernel.jupyter.url_reach import PAGES, Reach, Target, allowed_host, browser_trimmed, target
from url_payloads import DENO_DIFFERS, ENTITY_CASES, URL_CASES, Case, judge_says, verdict_from_parses

try:
    import deno

    DENO: str | None = deno.find_deno_bin()
except (ImportError, FileNotFoundError):
    DENO = None


@pytest.mark.parametrize("case", URL_CASES, ids=[repr(c.url) for c in URL_CASES])
def test_the_judge_agrees_with_the_table(case: Case) -> None:
    assert target(case.url) == Target(case.reach, case.scheme, case.host)


def test_urllib_is_fooled_where_the_judge_is_not() -> None:
    """Why the judge exists: Python's parser sees a relative path where browsers see another host."""
    from urllib.parse import urlsplit

    fooled = [c.url for c in URL_CASES if c.reach is Reach.HOST and not urlsplit(c.url.strip()).netloc]
    assert "/\\evil.example/x?d=SECRET" in fooled and "http:evil.example/x" in fooled
    assert all(target(url).reach is Reach.HOST for url in fooled)


@pytest.mark.parametrize(
    ("entry", "host"),
    [
        ("Images.Example.ORG", "images.example.org"),
        ("images.example.org.", "images.example.org"),
        ("b\u00fccher.de", "xn--bcher-kva.de"),
        ("127.1", "127.0.0.1"),
        ("::1", "[::1]"),
        ("[::1]", "[::1]"),
        ("bad host", ""),
    ],
)
def test_allow_net_hosts_are_parsed_as_the_browser_parses_hosts(entry: str, host: str) -> None:
    assert allowed_host(entry) == host


def test_browser_trimmed_strips_what_the_url_parser_strips() -> None:
    assert browser_trimmed("\x00 \x1f/\t/\r\ne\tvil \x7f\x01 ") == "//evil \x7f"


@pytest.mark.parametrize(("html_value", "decoded"), ENTITY_CASES)
def test_nh3_hands_attribute_values_over_decoded(html_value: str, decoded: str) -> None:
    """The judge sees what the browser's URL parser will see: nh3 decodes entities before its filter."""
    seen: list[str] = []

    def record(tag: str, attribute: str, value: str) -> str:
        seen.append(value)
        return value

    cleaned = nh3.clean(f'<img src="{html_value}">', attribute_filter=record)
    assert seen == [decoded]
    # And what nh3 writes back decodes to the same value (the browser judges what the filter judged).
    again: list[str] = []
    nh3.clean(cleaned, attribute_filter=lambda tag, attribute, value: again.append(value) or value)
    assert again == [decoded]


@pytest.mark.skipif(DENO is None, reason="no deno binary (pip package deno)")
def test_deno_new_url_agrees_on_every_case(tmp_path: Path) -> None:
    """A second WHATWG parser (Deno's `new URL()`) gives the judge's verdict for every URL but the ones
    DENO_DIFFERS explains."""
    script = tmp_path / "parse.js"
    script.write_text(
        "const {urls, pages} = JSON.parse(await new Response(Deno.stdin.readable).text());\n"
        "const parse = (u, p) => { try { const x = new URL(u, p); return [x.protocol, x.hostname]; }"
        " catch { return null; } };\n"
        "console.log(JSON.stringify(urls.map(u => pages.map(p => parse(u, p)))));\n"
    )
    urls = [c.url for c in URL_CASES]
    run = subprocess.run(
        [str(DENO), "run", "--no-prompt", "--quiet", str(script)],
        input=json.dumps({"urls": urls, "pages": list(PAGES)}),
        capture_output=True,
        text=True,
        timeout=60,
        env={"DENO_DIR": str(tmp_path / "deno"), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    disagree = {}
    for case, parsed in zip(URL_CASES, json.loads(run.stdout), strict=True):
        deno_says = verdict_from_parses([tuple(p) if p else None for p in parsed])
        if deno_says != judge_says(case.url):
            disagree[case.url] = deno_says
    assert disagree.keys() == DENO_DIFFERS.keys(), disagree

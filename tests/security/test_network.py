"""Network attacks: a listener on 127.0.0.1 records every connection; the guest tries to reach it.

Promise (SandboxKernel.allow_net): no network by default; with an allow-list, only the listed hosts;
"loopback, private and link-local addresses stay blocked unless listed as IPs".
"""

from __future__ import annotations

import socket
import threading

import pytest
from attack_kit import (
    DENIED,
    UdpListener,
    assert_alive,
    assert_denied,
    assert_refused,
    attack,
    dump,
    error,
    js_cell,
    loopback_hostname,
    os_layers,
    private_root,
    py_socket_get,
    py_urlopen,
    q,
    result,
    start_or_refusal,
)

from conftest import Listener, execute, start_kernel, stop_kernel


@pytest.fixture(scope="module")
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture(scope="module")
def other():
    """A second listener on another port: never listed anywhere."""
    server = Listener()
    yield server
    server.close()


@pytest.fixture(scope="module")
def listener6():
    try:
        server = Listener("::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    yield server
    server.close()


@pytest.fixture(scope="module")
def redirector(other):
    """An HTTP server that redirects every request to the unlisted listener."""
    reply = (
        f"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{other.port}/\r\nContent-Length: 0\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    server = Listener(reply=reply)
    yield server
    server.close()


@pytest.fixture(scope="module")
def offline(listener, other):
    """The default: no allow_net at all."""
    km, kc = start_kernel()
    yield km, kc
    stop_kernel(km, kc)


@pytest.fixture(autouse=True)
def _reset(listener, other):
    listener.hits.clear()
    other.hits.clear()


def fetch(url: str) -> str:
    return js_cell(f"const r = await fetch({q(url)}); return r.status + ' ' + await r.text()")


# ---- no network by default --------------------------------------------------------------------

ALIASES = [
    "127.0.0.1",
    "2130706433",
    "0x7f000001",
    "0x7f.1",
    "127.1",
    "0177.0.0.1",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "localhost",
    "localhost.",
    "LOCALHOST",
    "0.0.0.0",
    "0",
]


@pytest.mark.parametrize("host", ALIASES)
def test_fetch_to_loopback_aliases_is_blocked(offline, listener, host):
    _, kc = offline
    run = attack(kc, fetch(f"http://{host}:{listener.port}/"), "hello")
    assert_denied(run, "net")
    listener.assert_untouched()


def test_fetch_to_ipv6_loopback_is_blocked(offline, listener6):
    _, kc = offline
    run = attack(kc, fetch(f"http://[::1]:{listener6.port}/"), "hello")
    assert_denied(run, "net")
    listener6.assert_untouched()


def test_fetch_to_a_hostname_of_this_machine_is_blocked(offline, listener):
    _, kc = offline
    name = loopback_hostname() or socket.gethostname()
    run = attack(kc, fetch(f"http://{name}:{listener.port}/"), "hello")
    assert_denied(run, "net")
    listener.assert_untouched()


def test_pyfetch_is_blocked_with_a_message_naming_allow_net(offline, listener):
    _, kc = offline
    code = f"import pyodide.http\nr = await pyodide.http.pyfetch('http://127.0.0.1:{listener.port}/')\nawait r.string()"
    run = attack(kc, code, "hello")
    assert_refused(run, ["PermissionError"], "is blocked", "SandboxKernel.allow_net): none")
    listener.assert_untouched()


CHANNELS = {
    "deno-connect": lambda p: js_cell(
        f"const c = await Deno.connect({{hostname: '127.0.0.1', port: {p}}});"
        " await c.write(new TextEncoder().encode('GET / HTTP/1.0\\r\\n\\r\\n'));"
        " const b = new Uint8Array(100); await c.read(b); return new TextDecoder().decode(b)"
    ),
    "deno-connectTls": lambda p: js_cell(f"await Deno.connectTls({{hostname: '127.0.0.1', port: {p}}}); return 'up'"),
    "websocket": lambda p: js_cell(
        f"const ws = new WebSocket('ws://127.0.0.1:{p}/');"
        " return await new Promise((ok) => { ws.onopen = () => ok('open'); ws.onerror = () => ok('error');"
        " ws.onclose = () => ok('closed'); setTimeout(() => ok('timeout'), 2000); })"
    ),
    "event-source": lambda p: js_cell(
        f"const es = new EventSource('http://127.0.0.1:{p}/');"
        " return await new Promise((ok) => { es.onopen = () => ok('open'); es.onerror = () => { es.close(); ok('error'); };"
        " setTimeout(() => { es.close(); ok('timeout'); }, 2000); })"
    ),
    "dynamic-import-http": lambda p: js_cell(f"return String(await import('http://127.0.0.1:{p}/x.js'))"),
    "node-net-connect": lambda p: js_cell(
        "const net = await import('node:net');"
        f" return await new Promise((ok, no) => {{ const s = net.connect({p}, '127.0.0.1');"
        " s.on('connect', () => ok('connected')); s.on('error', no); setTimeout(() => ok('timeout'), 2000); })"
    ),
    "node-http-get": lambda p: js_cell(
        "const http = await import('node:http');"
        f" return await new Promise((ok, no) => {{ http.get('http://127.0.0.1:{p}/', (r) => ok('got ' + r.statusCode))"
        ".on('error', no); setTimeout(() => ok('timeout'), 2000); })"
    ),
    "python-urllib": py_urlopen,
    "python-socket": py_socket_get,
}


# How each channel fails: (ename, message) of the cell, or (None, result) for a cell that reports it itself.
CHANNEL_REFUSALS = {
    "deno-connect": ("JsException", 'NotCapable: Requires net access to "127.0.0.1:{port}"'),
    "deno-connectTls": ("JsException", 'NotCapable: Requires net access to "127.0.0.1:{port}"'),
    "websocket": ("JsException", 'NotCapable: Requires net access to "127.0.0.1:{port}"'),
    "event-source": (None, "'error'"),  # reports the refusal as an error event
    # Refused before any request: no remote code, ever.
    "dynamic-import-http": ("JsException", "ERR_UNSUPPORTED_ESM_URL_SCHEME"),
    "node-net-connect": ("JsException", 'NotCapable: Requires net access to "127.0.0.1:{port}"'),
    "node-http-get": ("JsException", 'NotCapable: Requires net access to "127.0.0.1:{port}"'),
    # No sockets in Pyodide; urllib names pyfetch and allow_net.
    "python-urllib": ("OSError", "urllib cannot open connections in the sandbox (no sockets)"),
    "python-socket": ("OSError", "Host is unreachable"),
}


@pytest.mark.parametrize("how", list(CHANNELS))
def test_other_network_apis_are_blocked(offline, listener, how):
    _, kc = offline
    run = attack(kc, CHANNELS[how](listener.port), "hello")
    ename, message = CHANNEL_REFUSALS[how]
    if ename is None:
        assert result(run) == message
    else:
        assert_refused(run, [ename], message.format(port=listener.port))
    listener.assert_untouched()


def test_pip_cannot_fetch_from_the_host(offline, listener):
    _, kc = offline
    run = attack(kc, f"%pip install http://127.0.0.1:{listener.port}/evil-1.0-py3-none-any.whl")
    assert_refused(run, ["PackageLoadError"], "%pip needs network access to the package index", "(now: none)")
    listener.assert_untouched()


def test_micropip_cannot_fetch_from_the_host(offline, listener):
    _, kc = offline
    url = f"http://127.0.0.1:{listener.port}/evil-1.0-py3-none-any.whl"
    run = attack(kc, f"import micropip\nawait micropip.install({url!r})")
    assert_refused(run, ["ValueError"], f"Can't fetch wheel from {url!r}")
    listener.assert_untouched()


def test_load_package_cannot_fetch_from_the_host(offline, listener):
    """loadPackage reports failures as output, not as an exception."""
    _, kc = offline
    run = attack(
        kc,
        f"import pyodide_js\nawait pyodide_js.loadPackage('http://127.0.0.1:{listener.port}/evil-1.0-py3-none-any.whl')",
    )
    assert run.content["status"] == "ok", dump(run)[:2000]
    assert run.stream() == "Loading evil\nFailed to load evil\n"
    assert f'Requires net access to "127.0.0.1:{listener.port}"' in run.stream("stderr")
    listener.assert_untouched()


def test_udp_is_blocked(offline):
    _, kc = offline
    udp = UdpListener()
    try:
        code = js_cell(
            "const dgram = await import('node:dgram'); const s = dgram.createSocket('udp4');"
            f" await new Promise((ok, no) => s.send('hello', {udp.port}, '127.0.0.1', (e) => e ? no(e) : ok()));"
            " return 'sent'"
        )
        run = attack(kc, code)
        # Node's dgram throws the refusal where no one can catch it: the sandbox restarts, and says why.
        assert_refused(run, ["SandboxRestarted"], 'Requires net access to "0.0.0.0:0"', "the sandbox was restarted")
        assert udp.received() == []
    finally:
        udp.close()


@pytest.mark.parametrize(
    ("code", "ename", "address"),
    [
        (
            js_cell("const l = Deno.listen({hostname: '127.0.0.1', port: 0}); return l.addr.port"),
            "JsException",
            "127.0.0.1:0",
        ),
        (
            js_cell("const l = Deno.listen({hostname: '0.0.0.0', port: 0}); return l.addr.port"),
            "JsException",
            "0.0.0.0:0",
        ),
        (
            js_cell("const s = Deno.serve({port: 0, onListen() {}}, () => new Response('x')); return 'serving'"),
            "JsException",
            "0.0.0.0:0",
        ),
        # node:net throws the refusal where no one can catch it: the sandbox restarts, and says why.
        (
            js_cell(
                "const net = await import('node:net'); const srv = net.createServer();"
                " return await new Promise((ok, no) => { srv.on('error', no); srv.listen(0, '127.0.0.1', () => ok('listening')); })"
            ),
            "SandboxRestarted",
            "127.0.0.1:0",
        ),
    ],
    ids=["deno-listen-loopback", "deno-listen-any", "deno-serve", "node-net-listen"],
)
def test_guest_cannot_open_a_server(offline, code, ename, address):
    _, kc = offline
    run = attack(kc, code)
    assert_refused(run, [ename], f'NotCapable: Requires net access to "{address}"')


def test_guest_cannot_reach_the_kernels_own_zmq_ports(offline):
    km, kc = offline
    ports = [km.shell_port, km.iopub_port, km.stdin_port, km.control_port, km.hb_port]
    code = js_cell(
        "const out = [];"
        f" for (const port of {q(ports)}) {{ try {{ const c = await Deno.connect({{hostname: '127.0.0.1', port}});"
        " c.close(); out.push('CONNECTED ' + port); } catch (e) { out.push(e.name); } }"
        " return JSON.stringify(out)"
    )
    run = attack(kc, code)
    assert eval(result(run)) == '["' + '","'.join(["NotCapable"] * 5) + '"]'


def test_guest_cannot_connect_to_a_host_unix_socket(offline, tmp_path):
    _, kc = offline
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    server.settimeout(0.5)
    accepted: list[bool] = []

    def accept() -> None:
        try:
            server.accept()
            accepted.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        run = attack(kc, js_cell(f"await Deno.connect({{transport: 'unix', path: {q(path)}}}); return 'connected'"))
        assert_denied(run)
    finally:
        thread.join()
        server.close()
    assert accepted == []


def test_dns_lookups_are_blocked(offline):
    """Deno reads the resolver's configuration before it checks the net permission: in the private root (the
    default here) the file is not there; under Landlock alone, reading it is refused; with neither, Deno's
    check refuses."""
    _, kc = offline
    run = attack(kc, js_cell("return JSON.stringify(await Deno.resolveDns('localhost', 'A'))"))
    if private_root(kc):
        ename, evalue = error(run)
        assert ename in DENIED and "No such file or directory (os error 2)" in evalue, evalue[:1000]
    elif "landlock" in os_layers(kc):
        ename, evalue = error(run)
        assert ename in DENIED and "Permission denied (os error 13)" in evalue, evalue[:1000]
    else:
        assert_denied(run, "net")


# ---- allow_net lists an IP:port ------------------------------------------------------------


@pytest.fixture(scope="module")
def listed(listener, redirector):
    km, kc = start_kernel([f"--SandboxKernel.allow_net=['127.0.0.1:{listener.port}', '127.0.0.1:{redirector.port}']"])
    yield km, kc
    stop_kernel(km, kc)


def test_listed_address_is_reachable(listed, listener):
    """Sanity: what the user lists works, with fetch and with pyfetch."""
    _, kc = listed
    assert result(execute(kc, fetch(f"http://127.0.0.1:{listener.port}/"))) == "'200 hello'"
    code = f"import pyodide.http\nr = await pyodide.http.pyfetch('http://127.0.0.1:{listener.port}/')\nawait r.string()"
    assert result(execute(kc, code)) == "'hello'"
    assert len(listener.settle()) == 2
    assert_alive(kc)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{other}/",
        "http://localhost:{other}/",
        "http://2130706433:{other}/",
        "http://127.0.0.2:{port}/",
    ],
    ids=["other-port", "localhost-other-port", "numeric-other-port", "other-loopback-ip"],
)
def test_unlisted_port_or_address_stays_blocked(listed, listener, other, url):
    _, kc = listed
    run = attack(kc, fetch(url.format(other=other.port, port=listener.port)), "hello")
    assert_denied(run, "net")
    other.assert_untouched()


def test_listed_ip_does_not_admit_its_hostname(listed, listener):
    _, kc = listed
    run = attack(kc, fetch(f"http://localhost:{listener.port}/"), "hello")
    assert_denied(run, "net")
    listener.assert_untouched()


def test_deno_connect_to_unlisted_port_is_blocked(listed, other):
    _, kc = listed
    run = attack(kc, CHANNELS["deno-connect"](other.port), "hello")
    assert_denied(run, "net")
    other.assert_untouched()


def test_redirect_from_a_listed_host_to_an_unlisted_port_is_blocked(listed, redirector, other):
    _, kc = listed
    run = attack(kc, fetch(f"http://127.0.0.1:{redirector.port}/"), "hello")
    assert_refused(run, ["JsException"], f'NotCapable: Requires net access to "127.0.0.1:{other.port}"')
    code = (
        f"import pyodide.http\nr = await pyodide.http.pyfetch('http://127.0.0.1:{redirector.port}/')\nawait r.string()"
    )
    run = attack(kc, code, "hello")
    # The message names the listed host, not the redirect's target: pyfetch sees only an aborted request.
    assert_refused(run, ["PermissionError"], f"network access to 127.0.0.1:{redirector.port} is blocked (AbortError)")
    assert len(redirector.settle()) == 2, "the listed host itself is reachable"
    other.assert_untouched()


# ---- allow_net lists host names ---------------------------------------------------------------


@pytest.mark.parametrize(
    "entries",
    [["{name}"], ["{name}:{port}"], ["127.0.0.1:{port}", "{name}"]],
    ids=["name", "name-port", "ip-port-and-name"],
)
@pytest.mark.parametrize("name", ["localhost", "hostname"])
def test_a_listed_name_that_resolves_to_loopback_does_not_reach_loopback(tmp_path, listener, other, name, entries):
    """Names resolve at connect time: listing one must not open loopback (nor other ports of a listed IP)."""
    if name == "hostname":
        name = loopback_hostname()
        if name is None:
            pytest.skip("no host name other than localhost resolves to loopback here")
    allow = [e.format(name=name, port=listener.port) for e in entries]
    started = start_or_refusal([f"--SandboxKernel.allow_net={allow!r}"], tmp_path)
    if not isinstance(started, str):
        stop_kernel(*started)
        pytest.fail(f"allow_net={allow!r} was accepted, though {name} resolves to loopback here")
    # Refused up front (the kernel resolves listed names as it starts), saying what to list instead.
    assert name in started and "resolves to" in started and "list the address itself" in started, started


@pytest.fixture(scope="module")
def public_listed():
    km, kc = start_kernel(["--SandboxKernel.allow_net=['192.0.2.10:443', 'no-such-host.invalid']"])
    yield km, kc
    stop_kernel(km, kc)


def test_allow_net_error_names_the_list(public_listed):
    _, kc = public_listed
    run = attack(kc, "import pyodide.http\nawait pyodide.http.pyfetch('http://192.0.2.1/')")
    assert_refused(run, ["PermissionError"], "SandboxKernel.allow_net): 192.0.2.10:443, no-such-host.invalid")


def test_listed_public_ip_port_does_not_open_loopback(public_listed, listener):
    _, kc = public_listed
    run = attack(kc, fetch(f"http://127.0.0.1:{listener.port}/"), "hello")
    assert_denied(run, "net")
    listener.assert_untouched()


def test_the_suite_listener_works(listener):
    """Sanity for the meta-tests: the host itself reaches the listener."""
    with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert b"hello" in s.recv(200)
    assert len(listener.settle()) == 1

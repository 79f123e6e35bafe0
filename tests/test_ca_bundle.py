"""TLS behind a proxy that inspects it: an HTTPS package index on 127.0.0.1 whose certificate is signed by a CA
made here (as a company proxy's would be). With SandboxKernel.ca_bundle, or the host's SSL_CERT_FILE or
SSL_CERT_DIR, `%pip install` from it works; without, the error says the certificate is not trusted."""

from __future__ import annotations

import datetime
import hashlib
import http.server
import ipaddress
import os
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from jupyter_client import KernelManager
from jupyter_client.blocking import BlockingKernelClient

from conftest import START_TIMEOUT, execute, stop_kernel, value
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME
from test_packages import make_wheel
from test_pyodide_index import write_lock

pytestmark = pytest.mark.timeout(600)
HOST_TRUST = ("SSL_CERT_FILE", "SSL_CERT_DIR", "DENO_TLS_CA_STORE")


def certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None
) -> x509.Certificate:
    """A CA certificate (no issuer: self-signed) or a server certificate for 127.0.0.1 signed by `issuer`."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0] if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = (
            builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A test CA (ca/ca.pem) and the index server's certificate and key, signed by it."""
    folder = tmp_path_factory.mktemp("pki")
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("sandbox-kernel test proxy CA", ca_key, None)
    server = certificate("127.0.0.1", server_key, (ca.subject, ca_key))
    (folder / "ca").mkdir()
    files = {"ca": folder / "ca" / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return files


def serve_tls(handler: type[http.server.BaseHTTPRequestHandler], cert: Path, key: Path) -> http.server.HTTPServer:
    """An HTTPS server on a free loopback port, with this certificate, serving in a daemon thread."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class HttpsIndex:
    """A PEP 503 simple index over HTTPS on 127.0.0.1 that serves one wheel and records every request."""

    def __init__(self, wheel: Path, cert: Path, key: Path) -> None:
        self.requests: list[str] = []
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        project = wheel.name.split("-")[0].replace("_", "-")
        page = f'<html><body><a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a></body></html>'
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                if self.path.rstrip("/") == f"/simple/{project}":
                    body, kind = page.encode(), "text/html"
                elif self.path == f"/files/{wheel.name}":
                    body, kind = wheel.read_bytes(), "application/octet-stream"
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))  # TLS: the body ends by its length
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()
                self.wfile.write(body)

            def do_HEAD(self) -> None:
                outer.requests.append(f"HEAD {self.path}")
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = serve_tls(Handler, cert, key)
        self.port = self.server.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}/simple"

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="module")
def index(pki, tmp_path_factory) -> Iterator[HttpsIndex]:
    wheel = make_wheel(tmp_path_factory.mktemp("wheels"), "sbk_tls")
    server = HttpsIndex(wheel, pki["cert"], pki["key"])
    yield server
    server.close()


def start(
    index: HttpsIndex, settings: list[str], host_trust: dict[str, str]
) -> tuple[KernelManager, BlockingKernelClient]:
    """A kernel allowed to reach the index, whose environment trusts exactly `host_trust` (nothing of this host's)."""
    env = {k: v for k, v in os.environ.items() if k not in HOST_TRUST}
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel(
        extra_arguments=[f"--SandboxKernel.allow_net=['127.0.0.1:{index.port}']", *settings], env={**env, **host_trust}
    )
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=START_TIMEOUT)
    return km, kc


def tls_trust(kc: BlockingKernelClient) -> str:
    return kc.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["tls_trust"]


def pip(kc: BlockingKernelClient, index: HttpsIndex):
    return execute(kc, f"%pip install sbk-tls --index-url {index.url}", timeout=180)


@pytest.mark.parametrize("given", ["ca_bundle", "SSL_CERT_FILE", "SSL_CERT_DIR"])
def test_pip_from_an_index_behind_a_tls_inspecting_proxy_works_when_its_ca_is_given(index, pki, given):
    ca = pki["ca"]
    settings = [f"--SandboxKernel.ca_bundle={ca}"] if given == "ca_bundle" else []
    host = {given: str(ca if given == "SSL_CERT_FILE" else ca.parent)} if given != "ca_bundle" else {}
    km, kc = start(index, settings, host)
    try:
        source = {
            "ca_bundle": f"SandboxKernel.ca_bundle={ca}",
            "SSL_CERT_FILE": f"the host's SSL_CERT_FILE={ca}",
            "SSL_CERT_DIR": f"the host's SSL_CERT_DIR={ca.parent}",
        }[given]
        assert tls_trust(kc) == (
            f"the sandbox's TLS connections (allow_net) trust 1 CA certificate from {source} besides Deno's built-in ones"
        )
        run = pip(kc, index)
        assert run.content["status"] == "ok", run.content
        assert value(execute(kc, "import sbk_tls; sbk_tls.VALUE")) == "'sbk_tls 1.0'"
        assert "/files/sbk_tls-1.0-py3-none-any.whl" in index.requests
        os_layers = kc.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["os_sandbox"]
        assert not os_layers.get("missing"), os_layers  # the OS layers in force let Deno read the certificates
    finally:
        stop_kernel(km, kc)


def test_without_the_ca_pip_says_the_certificate_is_not_trusted_and_names_ca_bundle(index):
    km, kc = start(index, [], {})
    try:
        assert (
            tls_trust(kc)
            == "the sandbox's TLS connections (allow_net) trust only Deno's built-in CA certificates (Mozilla's)"
        )
        seen = len(index.requests)
        run = pip(kc, index)
        assert run.content["status"] == "error"
        assert run.content["ename"] == "PackageLoadError"
        assert run.content["evalue"] == (
            f"certificate not trusted: the sandbox could not verify the TLS certificate of 127.0.0.1:{index.port} "
            "(invalid peer certificate: UnknownIssuer). If a proxy on this network inspects TLS, set "
            "SandboxKernel.ca_bundle to a PEM file of its CA certificate (or start Jupyter with SSL_CERT_FILE naming it)."
        )
        assert "correct package name" not in str(run.content)
        assert index.requests[seen:] == []  # no request got through the TLS handshake
    finally:
        stop_kernel(km, kc)


def test_a_ca_bundle_that_is_not_pem_is_a_settings_error(index, tmp_path):
    der = tmp_path / "proxy.cer"
    der.write_bytes(b"\x30\x82\x01\x0a not PEM")
    km, kc = start(index, [f"--SandboxKernel.ca_bundle={der}"], {})
    try:
        run = execute(kc, "1 + 1")
        assert run.content["ename"] == "SandboxSettingsError"
        assert (
            f"SandboxKernel.ca_bundle {der} holds no PEM certificate ('-----BEGIN CERTIFICATE-----')"
            in run.content["evalue"]
        )
    finally:
        stop_kernel(km, kc)


class HttpsFolder:
    """A folder served over HTTPS on 127.0.0.1 (a Pyodide index mirror behind the proxy)."""

    def __init__(self, folder: Path, cert: Path, key: Path) -> None:
        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, directory=str(folder), **kwargs)

            def log_message(self, *args: object) -> None:
                pass

        self.server = serve_tls(Handler, cert, key)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/"

    def close(self) -> None:
        self.server.shutdown()


def test_the_hosts_own_fetches_from_a_pyodide_index_trust_ca_bundle_too(pki, tmp_path):
    """Pyodide's packages are fetched by the kernel on the host: ca_bundle applies there as well."""
    make_wheel(tmp_path, "sbk_tls_index")
    write_lock(tmp_path)
    mirror = HttpsFolder(tmp_path, pki["cert"], pki["key"])
    env = {k: v for k, v in os.environ.items() if k not in HOST_TRUST}
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel(
        extra_arguments=[f"--SandboxKernel.pyodide_index={mirror.url}", f"--SandboxKernel.ca_bundle={pki['ca']}"],
        env=env,
    )
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=START_TIMEOUT)
        assert value(execute(kc, "import sbk_tls_index; sbk_tls_index.VALUE", timeout=120)) == "'sbk_tls_index 1.0'"
    finally:
        stop_kernel(km, kc)
        mirror.close()

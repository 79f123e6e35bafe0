"""What the sandbox's TLS trusts: SandboxKernel.ca_bundle, else the host's SSL_CERT_FILE, else its SSL_CERT_DIR
(sandbox/tls_trust.py)."""

from __future__ import annotations

import pytest

from sandbox_kernel.sandbox.tls_trust import CaBundleError, resolve

ONE = b"-----BEGIN CERTIFICATE-----\nT05F\n-----END CERTIFICATE-----"
TWO = b"-----BEGIN CERTIFICATE-----\nVFdP\n-----END CERTIFICATE-----"


def test_the_setting_comes_first_and_only_its_certificates_are_passed_on(tmp_path):
    bundle = tmp_path / "proxy.pem"
    bundle.write_bytes(b"Subject: the proxy\n" + ONE + b"\n-----BEGIN PRIVATE KEY-----\nX\n-----END PRIVATE KEY-----\n")
    other = tmp_path / "other.pem"
    other.write_bytes(TWO)
    ca, warnings = resolve(str(bundle), {"SSL_CERT_FILE": str(other)})
    assert (ca.pem, ca.source, warnings) == (ONE + b"\n", f"SandboxKernel.ca_bundle={bundle}", [])
    assert ca.describe() == (
        f"the sandbox's TLS connections (allow_net) trust 1 CA certificate from SandboxKernel.ca_bundle={bundle} "
        "besides Deno's built-in ones"
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p, "cannot be read: No such file or directory"),
        (lambda p: p.mkdir() or p, "is a folder: give a PEM file of CA certificates"),
        (lambda p: p.write_bytes(b"\x30\x82der") and p, "holds no PEM certificate ('-----BEGIN CERTIFICATE-----')"),
    ],
)
def test_a_setting_that_cannot_be_used_is_an_error_that_names_it(tmp_path, make, message):
    path = make(tmp_path / "ca.pem")
    with pytest.raises(CaBundleError) as caught:
        resolve(str(path), {})
    assert str(caught.value).startswith(f"SandboxKernel.ca_bundle {path} {message}")


def test_unset_the_hosts_ssl_cert_file_then_ssl_cert_dir_are_used(tmp_path):
    (tmp_path / "file.pem").write_bytes(ONE)
    folder = tmp_path / "certs"
    folder.mkdir()
    (folder / "a.pem").write_bytes(ONE)
    (folder / "b.crt").write_bytes(TWO + b"\n" + ONE)
    (folder / "README").write_text("not a certificate")
    ca, _ = resolve(None, {"SSL_CERT_FILE": str(tmp_path / "file.pem"), "SSL_CERT_DIR": str(folder)})
    assert (ca.pem, ca.source) == (ONE + b"\n", f"the host's SSL_CERT_FILE={tmp_path / 'file.pem'}")
    ca, warnings = resolve(None, {"SSL_CERT_FILE": str(tmp_path / "gone.pem"), "SSL_CERT_DIR": f"/nowhere:{folder}"})
    assert (ca.pem, ca.source) == (ONE + b"\n" + TWO + b"\n", f"the host's SSL_CERT_DIR=/nowhere:{folder}")
    assert warnings == [
        f"the host's SSL_CERT_FILE {tmp_path / 'gone.pem'} cannot be read: No such file or directory; it is not "
        "passed on (set SandboxKernel.ca_bundle)"
    ]


def test_nothing_set_means_deno_s_own_roots_and_the_store_is_passed_on_when_valid():
    ca, warnings = resolve(None, {"DENO_TLS_CA_STORE": "mozilla,system"})
    assert (ca.pem, ca.store, warnings) == (None, "mozilla,system", [])
    assert ca.describe() == (
        "the sandbox's TLS connections (allow_net) trust only Deno's built-in CA certificates (Mozilla's); "
        "DENO_TLS_CA_STORE=mozilla,system (the host's)"
    )
    ca, warnings = resolve(None, {"DENO_TLS_CA_STORE": "windows"})
    assert ca.store is None
    assert warnings == ["the host's DENO_TLS_CA_STORE='windows' is not passed on (Deno takes 'mozilla', 'system')"]


def test_a_host_fetch_the_host_does_not_trust_names_ca_bundle():
    from sandbox_kernel.packages.index import _tls_hint

    failed = OSError("<urlopen error [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local>")
    assert _tls_hint(failed) == (
        ": certificate not trusted; if a proxy on this network inspects TLS, set SandboxKernel.ca_bundle to its CA"
    )
    assert _tls_hint(OSError("<urlopen error [Errno 111] Connection refused>")) == ""

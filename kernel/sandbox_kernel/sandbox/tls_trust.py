"""The CA certificates the sandbox's TLS connections trust besides Deno's built-in (Mozilla) roots.

Behind a proxy that inspects TLS, the host trusts the proxy's CA through SSL_CERT_FILE or SSL_CERT_DIR; Deno
gets a scrubbed environment, so the kernel passes the certificates on itself: from SandboxKernel.ca_bundle, else
from the host's SSL_CERT_FILE, else from its SSL_CERT_DIR. They are read on the host once per kernel (PEM
certificates only), written into each sandbox's private folder (which the OS layers already let Deno read) and
named by Deno's `--cert`; nothing else of the host's is opened to the sandbox.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----")
MAX_BUNDLE_BYTES = 16 << 20  # far above any real bundle (Mozilla's is ~220 KB)
DENO_STORES = {"mozilla", "system"}  # what Deno's DENO_TLS_CA_STORE may name


class CaBundleError(ValueError):
    """A CA bundle that cannot be used; the message says what and how to fix it."""


@dataclass(frozen=True)
class CaTrust:
    """The extra CA certificates (PEM), where they came from, and the Deno CA store named on the host."""

    pem: bytes | None
    source: str  # for the log: "SandboxKernel.ca_bundle=...", "the host's SSL_CERT_FILE=...", ...
    store: str | None = None  # DENO_TLS_CA_STORE passed on, when the host sets a valid one

    def describe(self) -> str:
        if self.pem is None:
            trusted = "only Deno's built-in CA certificates (Mozilla's)"
        else:
            count = len(PEM_CERTIFICATE.findall(self.pem))
            trusted = f"{count} CA certificate{'s' * (count != 1)} from {self.source} besides Deno's built-in ones"
        store = f"; DENO_TLS_CA_STORE={self.store} (the host's)" if self.store else ""
        return f"the sandbox's TLS connections (allow_net) trust {trusted}{store}"


def certificates(path: Path, what: str) -> bytes:
    """The PEM certificates in a file, joined; CaBundleError when there is none or the file cannot be read."""
    try:
        if path.stat().st_size > MAX_BUNDLE_BYTES:
            raise CaBundleError(f"{what} {path} is larger than {MAX_BUNDLE_BYTES >> 20} MiB: not a CA bundle")
        data = path.read_bytes()
    except IsADirectoryError:
        raise CaBundleError(f"{what} {path} is a folder: give a PEM file of CA certificates") from None
    except OSError as exc:
        raise CaBundleError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    found = PEM_CERTIFICATE.findall(data)
    if not found:
        raise CaBundleError(
            f"{what} {path} holds no PEM certificate ('-----BEGIN CERTIFICATE-----'): give a PEM file of CA "
            "certificates (a DER .cer file converts with `openssl x509 -inform der -in FILE -out FILE.pem`)"
        )
    return b"\n".join(found) + b"\n"


def folder_certificates(folders: str) -> bytes:
    """The PEM certificates of every file in SSL_CERT_DIR's folders (':'-separated), in name order."""
    found = []
    for folder in filter(None, folders.split(os.pathsep)):
        try:
            entries = sorted(Path(folder).iterdir())
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_file():
                    found.append(certificates(entry, "a file in SSL_CERT_DIR"))
            except CaBundleError:
                continue  # SSL_CERT_DIR holds other files too (CRLs, READMEs)
    unique = list(dict.fromkeys(cert for block in found for cert in PEM_CERTIFICATE.findall(block)))
    return b"\n".join(unique) + b"\n" if unique else b""


def resolve(ca_bundle: str | None, environ: Mapping[str, str]) -> tuple[CaTrust, list[str]]:
    """What the sandbox trusts, and warnings about the host's variables that could not be used. An unusable
    `ca_bundle` (the setting) raises CaBundleError: it is a settings problem."""
    store = environ.get("DENO_TLS_CA_STORE")
    warnings = []
    if store is not None and not set(store.split(",")) <= DENO_STORES:
        warnings.append(f"the host's DENO_TLS_CA_STORE={store!r} is not passed on (Deno takes 'mozilla', 'system')")
        store = None
    if ca_bundle:
        path = Path(ca_bundle).expanduser().resolve()
        return CaTrust(certificates(path, "SandboxKernel.ca_bundle"), f"SandboxKernel.ca_bundle={path}", store), []
    cert_file, cert_dir = environ.get("SSL_CERT_FILE"), environ.get("SSL_CERT_DIR")
    if cert_file:
        try:
            pem = certificates(Path(cert_file), "the host's SSL_CERT_FILE")
            return CaTrust(pem, f"the host's SSL_CERT_FILE={cert_file}", store), warnings
        except CaBundleError as exc:
            warnings.append(f"{exc}; it is not passed on (set SandboxKernel.ca_bundle)")
    if cert_dir:
        pem = folder_certificates(cert_dir)
        if pem:
            return CaTrust(pem, f"the host's SSL_CERT_DIR={cert_dir}", store), warnings
        warnings.append(f"the host's SSL_CERT_DIR={cert_dir} holds no PEM certificate; it is not passed on")
    return CaTrust(None, "", store), warnings

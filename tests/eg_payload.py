"""Enterprise Gateway's side of the launcher's payload, for the tests: its public key as EG writes `{public_key}`,
and its decryption of a version 1 payload (ResponseManager._decode_payload's steps, with `cryptography`; EG's own
code decrypts it too, in tests/test_enterprise_gateway.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

from cryptography.hazmat.primitives import padding, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.padding import PKCS1v15
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=1024)  # EG's ResponseManager.KEY_SIZE


def eg_public_key(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPublicKey) -> str:
    """A public key as EG puts it on the launcher's command line: base64 DER, the PEM's body on one line."""
    public = key if isinstance(key, rsa.RSAPublicKey) else key.public_key()
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(der).decode()


def open_payload(data: bytes, key: rsa.RSAPrivateKey) -> dict[str, Any]:
    """The connection info in a payload the launcher sent, opened with EG's private key."""
    envelope = json.loads(base64.b64decode(data))
    assert envelope["version"] == 1 and set(envelope) == {"version", "key", "conn_info"}, envelope
    aes_key = key.decrypt(base64.b64decode(envelope["key"]), PKCS1v15())
    decryptor = Cipher(algorithms.AES(aes_key), modes.ECB()).decryptor()
    padded = decryptor.update(base64.b64decode(envelope["conn_info"])) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return dict(json.loads(unpadder.update(padded) + unpadder.finalize()))

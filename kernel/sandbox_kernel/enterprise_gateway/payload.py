"""The connection info as Enterprise Gateway's ResponseManager reads it (payload version 1).

EG's scheme, not ours: a fresh 16-byte AES key encrypts the JSON connection info (AES-128-ECB, PKCS#7 padding);
EG's RSA public key (sent on the launcher's command line as base64 DER, without PEM armour) encrypts that AES key
(PKCS#1 v1.5); both go, base64, in a JSON object that is itself sent base64-encoded.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import padding, serialization
from cryptography.hazmat.primitives.asymmetric import padding as asymmetric_padding
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

PAYLOAD_VERSION = 1  # the only version EG 3.x decrypts with its key pair
AES_KEY_BYTES = 16
MAX_KEY_TEXT = 4096  # EG's 1024-bit key is 216 characters; 4096-bit keys ~740
MIN_RSA_BITS = 1024  # EG's ResponseManager.KEY_SIZE


def load_public_key(text: str) -> RSAPublicKey:
    """EG's public key: base64 of a DER SubjectPublicKeyInfo holding an RSA key (ValueError if it is not one)."""
    if len(text) > MAX_KEY_TEXT:
        raise ValueError(f"{len(text)} characters is too long for EG's public key (at most {MAX_KEY_TEXT})")
    try:
        der = base64.b64decode(text, validate=True)
        key = serialization.load_der_public_key(der)
    except (binascii.Error, ValueError, UnsupportedAlgorithm):
        raise ValueError(
            f"{text[:40]!r}... is not a base64 DER public key (EG passes its ResponseManager's key as {{public_key}})"
        ) from None
    if not isinstance(key, RSAPublicKey):
        raise ValueError(f"EG's public key must be an RSA key, not {type(key).__name__}")
    if key.key_size < MIN_RSA_BITS:
        raise ValueError(f"an RSA key of {key.key_size} bits is too small (at least {MIN_RSA_BITS})")
    return key


def seal(connection_info: Mapping[str, object], public_key: RSAPublicKey) -> bytes:
    """The bytes to send to EG's response address for this connection info."""
    aes_key = os.urandom(AES_KEY_BYTES)
    padder = padding.PKCS7(algorithms.AES.block_size).padder()
    plain = padder.update(json.dumps(connection_info).encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(aes_key), modes.ECB()).encryptor()  # EG's mode: it decrypts nothing else
    sealed_info = encryptor.update(plain) + encryptor.finalize()
    sealed_key = public_key.encrypt(aes_key, asymmetric_padding.PKCS1v15())  # EG's padding (PKCS1_v1_5)
    envelope = {
        "version": PAYLOAD_VERSION,
        "key": base64.b64encode(sealed_key).decode(),
        "conn_info": base64.b64encode(sealed_info).decode(),
    }
    return base64.b64encode(json.dumps(envelope).encode())

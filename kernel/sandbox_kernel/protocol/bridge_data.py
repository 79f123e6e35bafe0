"""What may cross the skill bridge: JSON data plus bytes, within a size limit."""

from __future__ import annotations

import base64
import json
from typing import Any

BYTES_KEY = "__bytes__"
MAX_DEPTH = 64


class BridgeDataError(ValueError):
    """A value that cannot cross the bridge; the message names the type or the limit."""


def encode(value: Any, depth: int = 0) -> Any:
    """Turn a skill's result into JSON-ready data, refusing anything that is not data."""
    if depth > MAX_DEPTH:
        raise BridgeDataError(f"data nested deeper than {MAX_DEPTH} levels cannot cross the bridge")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {BYTES_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise BridgeDataError(f"dict keys must be str to cross the bridge, not {type(key).__name__}")
            out[key] = encode(item, depth + 1)
        return out
    raise BridgeDataError(
        f"a {type(value).__name__} cannot cross the bridge: only JSON data (None, bool, int, float, str, "
        "list, tuple, dict with str keys) and bytes are allowed"
    )


def decode(value: Any, depth: int = 0) -> Any:
    """Turn bridge data back into Python values (bytes restored)."""
    if depth > MAX_DEPTH:
        raise BridgeDataError(f"data nested deeper than {MAX_DEPTH} levels cannot cross the bridge")
    if isinstance(value, list):
        return [decode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if set(value) == {BYTES_KEY} and isinstance(value[BYTES_KEY], str):
            return base64.b64decode(value[BYTES_KEY])
        return {k: decode(v, depth + 1) for k, v in value.items() if k not in ("__proto__", "constructor")}
    return value


def dumps_limited(value: Any, limit: int, what: str) -> str:
    """JSON text of already-encoded data, or a clear error if it is over `limit` bytes."""
    text = json.dumps(value, allow_nan=False)
    if len(text.encode()) > limit:
        raise BridgeDataError(
            f"{what} is {len(text.encode())} bytes, over the bridge limit of {limit} bytes "
            "(SandboxKernel.skill_max_bytes)"
        )
    return text

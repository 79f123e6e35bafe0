"""cloudpickle 3.1.3 (a guest wheel), as far as the guest glue uses it."""

from collections.abc import Callable
from typing import Any

def dumps(obj: Any, protocol: int | None = None, buffer_callback: Callable[[Any], Any] | None = None) -> bytes: ...

"""micropip 0.11.1's seam to Pyodide, as far as the guest glue uses it (pkgs._micropip_lock_view)."""

from typing import Any

class CompatibilityLayer:
    lockfile_packages: dict[str, dict[str, Any]]
    loadPackage: Any

compatibility_layer: type[CompatibilityLayer]

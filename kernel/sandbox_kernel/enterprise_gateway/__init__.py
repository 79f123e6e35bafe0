"""Jupyter Enterprise Gateway: `sandbox-kernel launch-eg`, the kernel launcher that speaks EG's launch protocol
(connection info encrypted back to EG's response address, signals and shutdown on a comm port), and the
kernelspecs EG runs it from (docs/enterprise-gateway.md)."""

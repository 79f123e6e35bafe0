"""protocol: see docs/architecture.md."""

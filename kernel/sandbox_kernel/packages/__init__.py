"""packages: see docs/architecture.md."""

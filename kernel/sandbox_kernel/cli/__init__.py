"""cli: see docs/architecture.md."""

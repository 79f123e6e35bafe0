"""jupyter: see docs/architecture.md."""

"""sandbox: see docs/architecture.md."""

"""provisioner: see docs/architecture.md."""

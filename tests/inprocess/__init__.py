"""In-process tests: the real SandboxKernel with a fake sandbox behind it."""

"""Example host skills shipped with sandbox-kernel; exposed only when SandboxKernel.skills names them."""

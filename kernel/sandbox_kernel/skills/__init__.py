"""Example host skills shipped with sandbox-kernel (registered as entry points)."""

"""Unit tests of the guest glue (host_ts/guest/sandbox_guest) under plain CPython, with a fake host."""

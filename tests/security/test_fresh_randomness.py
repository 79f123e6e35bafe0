"""Every sandbox draws its own random numbers, though all start from one memory snapshot.

Promise (docs/security.md): `random` (and tempfile's names) are seeded from the OS in each sandbox, after a
snapshot restore, a restart, a checkpoint restore and in each copy of a fork; `secrets`/`os.urandom` always
read the OS. Not promised: the string-hash secret (set when the snapshot's interpreter started) is the same in
every sandbox started from that snapshot (`use_snapshot=False` gives each its own).
"""

from __future__ import annotations

from conftest import execute, start_kernel, stop_kernel, value
from sandbox_kernel import Sandbox

DRAW = "import random, tempfile, os\n(random.random(), next(tempfile._get_candidate_names()), os.urandom(8).hex())"


def draws(kc) -> tuple[str, str, str]:
    return eval(value(execute(kc, DRAW)))  # a tuple literal printed by the guest's Python


def test_two_kernels_and_a_restart_draw_different_numbers():
    first, second = start_kernel(), start_kernel()
    try:
        a, b = draws(first[1]), draws(second[1])
        assert a[0] != b[0] and a[1] != b[1] and a[2] != b[2], (a, b)
        first[0].restart_kernel()
        first[1].wait_for_ready(timeout=180)
        c = draws(first[1])
        assert c[0] not in (a[0], b[0]) and c[1] not in (a[1], b[1]), (a, b, c)
    finally:
        stop_kernel(*first)
        stop_kernel(*second)


def test_the_copies_of_a_fork_draw_their_own_numbers():
    with Sandbox() as box:
        box.run("import random")
        copy = box.fork()
        try:
            mine = box.run("random.random()").text
            theirs = copy.run("random.random()").text
            assert mine and theirs and mine != theirs, (mine, theirs)
        finally:
            copy.close()

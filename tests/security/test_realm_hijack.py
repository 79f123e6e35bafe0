"""Promise (host_ts/ring.ts, reply_slot.ts, worker.ts): the glue's shared memory never reaches guest code through the
built-ins they share. Guest code can replace `Atomics`' functions in the worker's realm; the glue calls the
ones it captured at load, so a replacement never sees the ring's, the reply slot's or the lifeline's control words.
"""

from __future__ import annotations

import pytest
from attack_kit import assert_alive, js_cell, result

from conftest import execute, start_kernel, stop_kernel

SPY = """
globalThis.__handed = [];
for (const name of ["load", "store", "add", "notify", "wait", "waitAsync", "exchange", "compareExchange"]) {
  const real = Atomics[name];
  Atomics[name] = function (array, ...rest) {
    globalThis.__handed.push(name + ":" + (array && array.buffer && array.buffer.byteLength));
    return real.call(Atomics, array, ...rest);
  };
}
return "spying";
"""


@pytest.fixture(scope="module")
def kc():
    km, kc = start_kernel()
    yield kc
    stop_kernel(km, kc)


def test_replaced_atomics_are_never_handed_the_glues_shared_memory(kc):
    assert result(execute(kc, js_cell(SPY))) == "'spying'"
    execute(
        kc,
        "print('x' * 100_000)\nimport sys; print('y', file=sys.stderr)\nfrom IPython.display import display; display(1)"
        # a request the kernel answers through the reply slot
        "\nfrom sandbox_guest import _host\nprint(_host.request({'type': 'skill_call', 'skill': 'S', 'method': 'm', "
        "'args': [], 'kwargs': {}}))",
    )
    run = execute(kc, js_cell("return JSON.stringify(globalThis.__handed)"))
    assert result(run) == "'[]'", f"the glue called the guest's Atomics: {result(run)}"
    # the spy itself works: guest code calling Atomics is seen
    seen = execute(
        kc, js_cell("Atomics.load(new Int32Array(new SharedArrayBuffer(8)), 0); return globalThis.__handed.length")
    )
    assert result(seen) == "1"
    assert_alive(kc)

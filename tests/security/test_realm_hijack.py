"""Promise (host_ts/shared_views.ts and its users ring.ts, reply_slot.ts, file_channel.ts, worker.ts and
shell.ts): the glue's shared memory never reaches guest code through the built-ins they share. Guest code can replace
`Atomics`' functions, a typed array's methods and getters, the constructor `slice` and `subarray` consult, and
`DataView` in the worker's realm; the glue calls only what it captured at load and makes its views of shared memory
directly, so a replacement never sees the ring, the reply slot, the file channel, the interrupt word or the lifeline.
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
// A typed array's methods and getters, and the constructor its slice/subarray consult: seen when called on a
// view of shared memory (Pyodide's own typed arrays are on unshared memory).
const typed = Object.getPrototypeOf(Uint8Array.prototype);
const bufferOf = Object.getOwnPropertyDescriptor(typed, "buffer").get;
const onShared = (view) => { try { return bufferOf.call(view) instanceof SharedArrayBuffer; } catch { return false; } };
const note = (name, view) => { if (onShared(view)) globalThis.__handed.push(name); };
for (const name of ["set", "subarray", "slice", "fill", "copyWithin", "at", "indexOf", "join", "values"]) {
  const real = typed[name];
  typed[name] = function (...args) { note(name, this); return real.apply(this, args); };
}
for (const name of ["length", "buffer", "byteOffset", "byteLength"]) {
  const real = Object.getOwnPropertyDescriptor(typed, name).get;
  Object.defineProperty(typed, name, { get() { note(name, this); return real.call(this); }, configurable: true });
}
for (const kind of [Uint8Array, Int32Array]) {
  Object.defineProperty(kind.prototype, "constructor", {
    get() { note("constructor", this); return kind; }, configurable: true,
  });
}
const RealDataView = DataView;
globalThis.DataView = new Proxy(RealDataView, {
  construct(target, args) {
    if (args[0] instanceof SharedArrayBuffer) globalThis.__handed.push("DataView");
    return Reflect.construct(target, args);
  },
});
return "spying";
"""


@pytest.fixture(scope="module")
def kc(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rw")
    km, kc = start_kernel([f"--SandboxKernel.mounts=['{folder}:/data:rw']"])
    yield kc
    stop_kernel(km, kc)


def test_replaced_atomics_are_never_handed_the_glues_shared_memory(kc):
    assert result(execute(kc, js_cell(SPY))) == "'spying'"
    done = execute(
        kc,
        "print('x' * 100_000)\nimport sys; print('y', file=sys.stderr)\nfrom IPython.display import display; display(1)"
        # a request the kernel answers through the reply slot
        "\nfrom sandbox_guest import _host\nprint(_host.request({'type': 'skill_call', 'skill': 'S', 'method': 'm', "
        "'args': [], 'kwargs': {}}))"
        # a shell command: the shell reads and takes the interrupt word
        "\nget_ipython().system('sleep 0.01; echo shell')"
        # a write to a read-write mount: calls on the file channel
        "\nopen('/data/x.csv', 'w').write('a,b\\n1,2\\n')\nprint(open('/data/x.csv').read())",
    )
    assert done.content["status"] == "ok" and done.stream().endswith("a,b\n1,2\n\n"), done.content
    run = execute(kc, js_cell("return JSON.stringify(globalThis.__handed)"))
    assert result(run) == "'[]'", f"the glue called the guest's built-ins on shared memory: {result(run)}"
    # the spies work: guest code calling them on shared memory is seen
    probe = (
        "Atomics.load(new Int32Array(new SharedArrayBuffer(8)), 0); new Uint8Array(new SharedArrayBuffer(8)).set([1]);"
        "new Uint8Array(new SharedArrayBuffer(8)).slice(0, 1); new DataView(new SharedArrayBuffer(8));"
        "return JSON.stringify([...new Set(globalThis.__handed)].sort())"
    )
    seen = execute(kc, js_cell(probe))
    assert result(seen) == """'["DataView","buffer","constructor","load:8","set","slice"]'"""
    assert_alive(kc)

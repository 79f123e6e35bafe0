"""AsyncSandboxPool: sandboxes started ahead of need, for programs that start many (agents, services).

A sandbox takes ~0.5-0.7 s from launch to its first result (a kernel process, then Deno and Pyodide). A pool keeps
`size` of them started, each with its Python up and its JIT warmed (a silent warm-up cell: nothing in its history,
its execution count still 1), so that `take()` hands one over at once. Each is handed out once and never comes
back: the caller owns it (`async with`, or close()), and the pool starts another in its place, one at a time in the
background. The price is memory: every waiting sandbox is a kernel process and a Deno process (~220 MiB PSS).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from sandbox_kernel.client.agent import AsyncSandbox, SandboxOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

# Run silently in every pooled sandbox before it is handed out. A wasm function cannot change tiers while it runs, so
# a first cell whose loop starts before V8 has compiled Python's interpreter loop with its optimising tier runs it on
# baseline code (~1.5x slower) until it returns. This calls a small CPU-bound function again and again (each call
# from `map` enters the interpreter loop anew, so it picks up optimised code as soon as there is some) until its
# time has dropped to the warm speed and stays there, or 3 s have passed. Nothing is left in the user's namespace.
WARM_UP = """
def _sandbox_warm_up():
    import time
    def work(n):
        total, items, names = 0, [], {}
        for i in range(n):
            total += (i * i) % 7
            items.append(i)
            names[str(i & 255)] = i
        return total + len(items) + len(names)
    def timed(n):
        t0 = time.perf_counter()
        work(n)
        return time.perf_counter() - t0
    times, deadline = [], time.monotonic() + 3
    while time.monotonic() < deadline:
        times += map(timed, [20_000])
        best = min(times)
        if len(times) > 5 and best < 0.8 * times[0] and max(times[-5:]) < 1.15 * best:
            break
_sandbox_warm_up()
del _sandbox_warm_up
"""


class AsyncSandboxPool:
    """Keeps `size` started sandboxes (keywords as for AsyncSandbox) ready to hand out; use as `async with`.

    `take()` returns a started AsyncSandbox that nobody used before; close it when done (the pool never takes it
    back). `warm=False` leaves out the JIT warm-up cell (a sandbox is then ready ~1 s sooner, its first CPU-bound
    cell runs on baseline code).
    """

    def __init__(self, size: int = 1, *, warm: bool = True, **options: Unpack[SandboxOptions]) -> None:
        if size < 1:
            raise ValueError(f"AsyncSandboxPool(size={size!r}): keep at least one sandbox ready")
        AsyncSandbox._for("AsyncSandboxPool", options)  # the keywords are checked now, before anything starts
        self.size = size
        self.warm = warm
        self._options: dict[str, Any] = dict(options)
        self._ready: asyncio.Queue[AsyncSandbox] = asyncio.Queue()
        self._filler: asyncio.Task[None] | None = None
        self._failed: BaseException | None = None  # why the last start failed: take() raises it
        self._closed = False

    async def __aenter__(self) -> AsyncSandboxPool:
        self.fill()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def ready(self) -> int:
        """Sandboxes started and waiting to be taken."""
        return self._ready.qsize()

    def fill(self) -> None:
        """Start sandboxes in the background until `size` are ready (one at a time: starts share the CPUs)."""
        if self._closed:
            raise RuntimeError("this AsyncSandboxPool is closed")
        if self._filler is None or self._filler.done():
            self._failed = None
            self._filler = asyncio.get_running_loop().create_task(self._fill())

    async def _fill(self) -> None:
        while self._ready.qsize() < self.size:
            try:
                sandbox = await self._started()
            except Exception as exc:  # told to whoever takes next; filling stops until then
                self._failed = exc
                return
            await self._ready.put(sandbox)

    async def _started(self) -> AsyncSandbox:
        sandbox = AsyncSandbox._for("AsyncSandboxPool", self._options)  # type: ignore[arg-type]
        await sandbox.start()
        try:
            # Its Python is up (and warm) before it waits. A warm-up that failed (a cell_timeout shorter than it
            # restarts the sandbox) leaves a sandbox that is up all the same once `pass` has run.
            if not await sandbox._silently(WARM_UP if self.warm else "pass"):
                await sandbox._silently("pass")
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def take(self, timeout: float | None = None) -> AsyncSandbox:
        """A started sandbox of the pool's (waiting for one, at most `timeout` s, if none is ready: TimeoutError);
        a start that failed raises its error here (e.g. SandboxSettingsError). Another is started in its place."""
        if self._closed:
            raise RuntimeError("this AsyncSandboxPool is closed")
        return await asyncio.wait_for(self._take(), timeout)

    async def _take(self) -> AsyncSandbox:
        while True:
            if self._ready.empty():
                self._raise_failure()
                self.fill()
                getting = asyncio.ensure_future(self._ready.get())
                assert self._filler is not None
                try:
                    await asyncio.wait({getting, self._filler}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not getting.done():
                        getting.cancel()
                if not getting.done() or getting.cancelled():
                    self._raise_failure()
                    continue
                sandbox = getting.result()
            else:
                sandbox = self._ready.get_nowait()
            self.fill()
            assert sandbox.kernel is not None
            if await sandbox.kernel.gone() is None:
                return sandbox
            await sandbox.close()  # it died while it waited: never handed out

    def _raise_failure(self) -> None:
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

    async def close(self) -> None:
        """Stop starting sandboxes and close those not taken."""
        self._closed = True
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(BaseException):
                await self._filler
        while not self._ready.empty():
            await self._ready.get_nowait().close()

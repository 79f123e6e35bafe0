"""The threads that run synchronous skill methods, so that none blocks the kernel's event loop.

Like a ThreadPoolExecutor, but with a lighter hand-over (issue 28): a call is put on a queue that idle threads wait
on, and its result is handed back with one `call_soon_threadsafe`, without concurrent.futures' Future and the chain
that asyncio.wrap_future builds around it (~25 us less per call, measured). Threads are started as calls need them,
up to `max_threads` (a blocking skill holds one; calls beyond wait for a free one), and they stay for the process.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

_Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class SkillThreads:
    """Runs synchronous callables on threads of their own; awaited from the event loop."""

    def __init__(self, max_threads: int, name: str = "skill") -> None:
        self.max_threads = max_threads
        self.name = name
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    async def run(self, fn: Callable[[], Any]) -> Any:
        """`fn()`'s result (or its exception), computed on one of the threads. Cancelling the wait leaves `fn` to
        finish on its thread; its result is then dropped."""
        loop = asyncio.get_running_loop()
        result: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._idle:
                self._idle -= 1  # this call is that thread's
            elif self._threads < self.max_threads:
                self._threads += 1
                threading.Thread(target=self._serve, name=f"{self.name}-{self._threads}", daemon=True).start()
        self._calls.put((loop, result, fn))
        return await result

    def _serve(self) -> None:
        while True:
            loop, result, fn = self._calls.get()
            try:
                value, error = fn(), None
            except BaseException as exc:  # handed to the caller, as an executor would
                value, error = None, exc
            try:
                loop.call_soon_threadsafe(_settle, result, value, error)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass
            with self._lock:
                self._idle += 1

    @property
    def threads(self) -> int:
        return self._threads


def _settle(result: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if result.done():  # the caller stopped waiting (a timeout, an interrupt)
        return
    if error is not None:
        result.set_exception(error)
    else:
        result.set_result(value)

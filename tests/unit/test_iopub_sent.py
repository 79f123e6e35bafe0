"""A prompt waits for the output before it: `iopub_sent` returns only once ipykernel's IOPub thread has sent
everything queued before the call (the thread is real; it is held busy to play a loaded machine)."""

from __future__ import annotations

import asyncio
import threading

import zmq
from ipykernel.iostream import BackgroundSocket, IOPubThread

from sandbox_kernel.jupyter.channels import iopub_sent


def test_waits_for_what_the_iopub_thread_still_holds():
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    thread = IOPubThread(pub)
    thread.start()
    held = threading.Event()
    try:
        socket = BackgroundSocket(thread)
        while True:  # a PUB socket drops what it sends before the subscription arrives
            socket.send_multipart([b"hello"])
            if sub.poll(100):
                sub.recv_multipart()
                break
        thread.schedule(held.wait)  # the thread is busy (a loaded machine)
        socket.send_multipart([b"printed before the prompt"])

        async def scenario() -> bool:
            waiting = asyncio.ensure_future(iopub_sent(socket))
            await asyncio.sleep(0.2)
            early = waiting.done()
            held.set()
            await asyncio.wait_for(waiting, 5)
            return early

        assert asyncio.run(scenario()) is False, "iopub_sent returned while the output was still queued"
        assert sub.poll(5000), "the output was never sent"
        assert sub.recv_multipart() == [b"printed before the prompt"]
    finally:
        held.set()
        thread.stop()
        thread.close()
        sub.close()
        ctx.term()


def test_returns_at_once_without_an_iopub_thread():
    """A plain zmq socket (no IOPub thread) has sent its messages already."""
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    try:
        asyncio.run(asyncio.wait_for(iopub_sent(pub), 1))
    finally:
        pub.close()
        ctx.term()

"""The per-cell output budget counts each message's envelope, so a flood of tiny messages stops early."""

from __future__ import annotations

import asyncio

from sandbox_kernel.jupyter.output import ENVELOPE_BYTES, OutputRouter, size_of


def test_a_flood_of_tiny_messages_is_cut_by_count_and_the_notice_follows() -> None:
    async def flood() -> list[tuple[str, dict, dict]]:
        sent: list[tuple[str, dict, dict]] = []
        router = OutputRouter(lambda t, c, m, b=None: sent.append((t, c, m)), max_bytes=10_000)
        for _ in range(5_000):
            router.publish("clear_output", {"wait": False})
        router.flush()
        return sent

    sent = asyncio.run(flood())
    per_message = size_of({"wait": False}) + ENVELOPE_BYTES
    guest = [s for s in sent if not s[2]]
    assert len(guest) == 10_000 // per_message  # 36, far below IOPub's high-water mark of 1000
    assert [s[2] for s in sent[len(guest) :]] == [{"sandbox_kernel": {"notice": "truncated"}}]

"""AsyncSandbox.download against a fake guest that may lie: about a file's size, or by answering a read with more
than was asked. The host side reads at most max_bytes + 1 bytes, whatever the guest says or sends."""

from __future__ import annotations

import asyncio
import base64
import re

import pytest

from sandbox_kernel.client.agent import AsyncSandbox
from sandbox_kernel.client.transfer import CHUNK, chunk_bytes, reported_size

CAP = 3 * CHUNK + 5  # not a whole number of reads


class FakeGuest(AsyncSandbox):
    """Answers download()'s helper code as the guest's glue would, from `content`, with `size` as the size it
    claims (default: the truth) and `extra` bytes added to every read; notes every read asked for."""

    def __init__(self, content: bytes, size: str | None = None, extra: int = 0, answer: str | None = None) -> None:
        super().__init__()
        self.content, self.size, self.extra, self.answer = content, size, extra, answer
        self.reads: list[tuple[int, int]] = []  # (offset, bytes asked for)
        self.sent = 0  # characters of base64 handed to the host

    async def _evaluate(self, expression: str) -> str:
        if ".path.getsize(" in expression:
            return str(len(self.content)) if self.size is None else self.size
        found = re.search(r"f\.seek\((\d+)\).*f\.read\((\d+)\)", expression)
        assert found, expression
        offset, asked = int(found.group(1)), int(found.group(2))
        self.reads.append((offset, asked))
        data = self.content[offset : offset + asked] + b"\0" * self.extra
        text = base64.b64encode(data).decode() if self.answer is None else self.answer
        self.sent += len(text)
        return text


def download(guest: FakeGuest, max_bytes: int | None = CAP) -> bytes:
    return asyncio.run(guest.download("/data/f", max_bytes))


@pytest.mark.parametrize("length", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, CAP - 1, CAP])
def test_honest_files_up_to_the_cap_come_whole(length: int) -> None:
    content = bytes(i % 251 for i in range(length))
    guest = FakeGuest(content)
    assert download(guest) == content
    assert sum(asked for _, asked in guest.reads) <= CAP + 1
    assert [offset for offset, _ in guest.reads] == [i * CHUNK for i in range(len(guest.reads))]


def test_an_honest_file_over_the_cap_is_refused_before_any_read() -> None:
    guest = FakeGuest(b"x" * (CAP + 1))
    with pytest.raises(OSError) as refused:
        download(guest)
    assert str(refused.value) == f"/data/f has {CAP + 1} bytes, more than the {CAP} allowed"
    assert guest.reads == []


@pytest.mark.parametrize("claimed", ["0", "1", str(CAP)])
def test_a_file_claimed_small_is_read_on_and_refused_at_the_cap_plus_one_byte(claimed: str) -> None:
    guest = FakeGuest(b"x" * (10 * CAP), size=claimed)
    with pytest.raises(OSError) as refused:
        download(guest)
    assert str(refused.value) == (
        f"/data/f has more than the {CAP} bytes allowed (the sandbox said {claimed}); "
        f"the read stopped at {CAP + 1} bytes"
    )
    assert sum(asked for _, asked in guest.reads) == CAP + 1
    assert guest.sent == sum(4 * ((asked + 2) // 3) for _, asked in guest.reads)  # nothing more came


def test_an_answer_longer_than_the_read_is_refused_and_no_read_follows() -> None:
    guest = FakeGuest(b"tiny", size="1", extra=7 * CHUNK)
    with pytest.raises(OSError) as refused:
        download(guest)
    sent = 4 * ((4 + 7 * CHUNK + 2) // 3)
    assert str(refused.value) == (
        f"the sandbox's answer to a read of {CHUNK} bytes of /data/f: {sent} characters of base64, more than the "
        f"{4 * ((CHUNK + 2) // 3)} that {CHUNK} bytes take; refused unread"
    )
    assert guest.reads == [(0, CHUNK)]


def test_a_long_answer_is_refused_by_its_length_before_it_is_decoded() -> None:
    with pytest.raises(OSError) as refused:
        download(FakeGuest(b"tiny", answer="!" * (4 * ((CHUNK + 2) // 3) + 1)))
    assert f"more than the 1398104 that {CHUNK} bytes take; refused unread" in str(refused.value)


def test_an_answer_that_is_not_base64_is_refused() -> None:
    with pytest.raises(OSError) as refused:
        download(FakeGuest(b"tiny", answer="not base64!"))
    assert str(refused.value).startswith(f"the sandbox's answer to a read of {CHUNK} bytes of /data/f: not base64 (")


def test_a_short_answer_that_decodes_to_more_than_asked_is_refused() -> None:
    assert chunk_bytes("AAAA", 3, "/f") == b"\0\0\0"
    with pytest.raises(OSError) as refused:
        chunk_bytes("AAAA", 1, "/f")
    assert str(refused.value) == "the sandbox's answer to a read of 1 bytes of /f: 3 bytes, more than the 1 asked for"


@pytest.mark.parametrize("said", ["", "-1", "1.5", "1e9", "12" * 11, "٣", "None"])
def test_a_size_that_is_not_a_plain_number_is_refused(said: str) -> None:
    with pytest.raises(OSError) as refused:
        reported_size(said, "/f")
    assert str(refused.value) == f"the sandbox gave {said!r} as the size of /f, not a number of bytes"


def test_without_a_cap_reading_goes_on_past_the_claimed_size_to_the_end() -> None:
    content = b"y" * (2 * CHUNK + 3)
    guest = FakeGuest(content, size="1")
    assert download(guest, None) == content
    assert guest.reads == [(0, CHUNK), (CHUNK, CHUNK), (2 * CHUNK, CHUNK)]

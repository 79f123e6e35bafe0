"""The test switch that sends the sandbox's output uncleaned (to test the page policy alone): off unless its
environment variable says exactly 1, and loud when on."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from test_dispatcher import FakeServices, Harness

from sandbox_kernel.protocol.dispatcher import NO_CLEANING_NOTICE, TEST_NO_CLEANING

HOSTILE = '<img src=x onerror="fetch(1)"><script>1</script>'


def _sent(events: list[dict]) -> list[tuple[str, dict, dict]]:
    async def go() -> Harness:
        h = Harness(FakeServices())
        for event in events:
            h.event(event)
        h.dispatcher.finish()
        return h

    return asyncio.run(go()).sent


DISPLAY = {
    "type": "iopub",
    "msg_type": "display_data",
    "content": {"data": {"text/html": HOSTILE, "application/javascript": "1"}, "metadata": {}},
}
UPDATE = {
    **DISPLAY,
    "msg_type": "update_display_data",
    "content": {**DISPLAY["content"], "transient": {"display_id": "d"}},
}
COMM = {
    "type": "iopub",
    "msg_type": "comm_open",
    "content": {"comm_id": "c1", "target_name": "bokeh.comm", "data": {"state": {"value": HOSTILE}}},
}


@pytest.mark.parametrize("value", [None, "", "0", "true", "yes", " 1"])
def test_the_output_is_cleaned_unless_the_variable_is_exactly_1(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(TEST_NO_CLEANING, raising=False)
    else:
        monkeypatch.setenv(TEST_NO_CLEANING, value)
    sent = _sent([DISPLAY, COMM])
    assert [c["data"] for t, c, _ in sent if t == "display_data"] == [{"text/html": '<img src="x">'}]
    assert not [t for t, _, _ in sent if t == "comm_open"]  # a target the guard refuses
    assert "TEST MODE" not in json.dumps(sent)


def test_with_the_switch_on_everything_passes_as_sent_and_each_request_says_so(monkeypatch, caplog):
    monkeypatch.setenv(TEST_NO_CLEANING, "1")
    with caplog.at_level(logging.WARNING):
        sent = _sent([DISPLAY, COMM, UPDATE])
    assert sent[0] == ("stream", {"name": "stderr", "text": NO_CLEANING_NOTICE}, sent[0][2])  # first, and once
    assert [c["text"] for t, c, _ in sent if t == "stream"] == [NO_CLEANING_NOTICE]
    assert [(t, c["data"]) for t, c, _ in sent if t != "stream"] == [
        ("display_data", DISPLAY["content"]["data"]),
        ("comm_open", COMM["content"]["data"]),
        ("update_display_data", DISPLAY["content"]["data"]),
    ]
    assert TEST_NO_CLEANING in caplog.text


def test_no_kernel_setting_turns_it_on():
    """Only the environment does: no SandboxKernel trait names it."""
    from sandbox_kernel.jupyter.kernel import SandboxKernel

    names = " ".join(SandboxKernel.class_trait_names()).lower()
    assert "clean" not in names and "sanitiz" not in names

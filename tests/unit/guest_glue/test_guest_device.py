"""The `device` object (sandbox_guest.device): skill calls marshalled to the host and its answers turned back."""

from __future__ import annotations

import pytest
from sandbox_guest.device import Device, SkillDataError, SkillError, SkillRefused, SkillTimeout

from guest_glue.fake_host import INTERRUPT

CATALOG = {
    "TimeSkill": {
        "doc": "Clock on the host.",
        "methods": {
            "now": {"signature": "(tz: str = 'UTC') -> str", "doc": "The current time."},
            "sleep_until": {"signature": "(when: str) -> None", "doc": "Wait for a moment."},
        },
    },
    "Files": {"doc": "Host files.", "methods": {"read": {"signature": "(name: str) -> bytes", "doc": "Read one."}}},
}


@pytest.fixture
def device() -> Device:
    return Device(CATALOG, max_bytes=1000)


def test_a_call_sends_the_skill_method_and_encoded_arguments(host, device):
    host.answers = [{"value": "12:00"}]
    assert device.TimeSkill.now("CET", blob=b"\x00\x01", pair=(1, [2.5, None, True])) == "12:00"
    assert host.events() == [
        {
            "type": "skill_call", "skill": "TimeSkill", "method": "now", "n": 1,
            "args": ["CET"], "kwargs": {"blob": {"__bytes__": "AAE="}, "pair": [1, [2.5, None, True]]},
        }
    ]  # fmt: skip


def test_bytes_in_the_answer_come_back_as_bytes(host, device):
    host.answers = [{"value": {"body": {"__bytes__": "aGk="}, "parts": [{"__bytes__": ""}], "n": 1}}]
    assert device.Files.read("x") == {"body": b"hi", "parts": [b""], "n": 1}


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        ({"type": "SkillRefused", "message": "not allowed", "exception": ""}, SkillRefused),
        ({"type": "SkillTimeout", "message": "took > 5 s", "exception": ""}, SkillTimeout),
        ({"type": "SkillDataError", "message": "too large", "exception": ""}, SkillDataError),
        ({"type": "SomethingElse", "message": "boom", "exception": "ZeroDivisionError"}, SkillError),
    ],
)
def test_a_failed_call_raises_the_error_the_host_names(host, device, error, raised):
    host.answers = [{"error": error}]
    with pytest.raises(raised) as caught:
        device.TimeSkill.now()
    assert type(caught.value) is raised
    assert str(caught.value) == error["message"]
    assert caught.value.exception_type == error["exception"]


def test_an_answer_without_value_or_error_is_a_skill_error(host, device):
    host.answers = [["not", "a", "dict"], {}]
    with pytest.raises(SkillError, match=r"^the skill call failed$"):
        device.TimeSkill.now()
    with pytest.raises(SkillError, match=r"^the skill call failed$"):
        device.TimeSkill.now()


def test_an_interrupted_call_raises_keyboard_interrupt(host, device):
    host.answers = [INTERRUPT]
    with pytest.raises(KeyboardInterrupt):
        device.TimeSkill.now()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((object(),), "a object cannot cross the bridge: only JSON data"),
        (({1: "x"},), "dict keys must be str to cross the bridge"),
        (("x" * 2000,), r"the arguments are \d+ bytes, over the bridge limit of 1000 bytes \(SandboxKernel.skill_max"),
    ],
)
def test_arguments_that_cannot_cross_are_refused_in_the_guest(host, device, args, message):
    with pytest.raises(SkillDataError, match=message):
        device.TimeSkill.now(*args)
    assert host.events() == []  # nothing was sent


def test_arguments_nested_too_deep_are_refused(host, device):
    nested: list = []
    for _ in range(70):
        nested = [nested]
    with pytest.raises(SkillDataError, match="nested deeper than 64 levels"):
        device.TimeSkill.now(nested)
    assert host.events() == []


def test_skill_data_error_is_a_type_error():
    assert issubclass(SkillDataError, TypeError)
    assert issubclass(SkillRefused, SkillError)
    assert Device.SkillRefused is SkillRefused


def test_an_unknown_skill_or_method_names_what_there_is(device):
    with pytest.raises(AttributeError, match=r"device has no skill 'Clock'. Available skills: Files, TimeSkill"):
        device.Clock  # noqa: B018
    with pytest.raises(AttributeError, match="has no skill '_catalog_copy'"):
        device._catalog_copy  # noqa: B018
    with pytest.raises(AttributeError, match=r"TimeSkill has no method 'later'. Its methods are: now, sleep_until"):
        device.TimeSkill.later  # noqa: B018
    with pytest.raises(AttributeError, match="has no method '_secret'"):
        device.TimeSkill._secret  # noqa: B018


def test_without_skills_the_error_says_where_they_are_chosen():
    empty = Device({}, 1000)
    with pytest.raises(AttributeError, match=r"Available skills: none. Skills are chosen on the host, e\.g\."):
        empty.TimeSkill  # noqa: B018
    assert repr(empty) == "<device: no skills (the host adds them with SandboxKernel.skills or skills_path)>"


def test_listing_describing_and_searching(device):
    assert repr(device) == "<device: Files, TimeSkill>"
    assert dir(device) == ["Files", "TimeSkill", "describe_function", "search_skills"]
    assert dir(device.TimeSkill) == ["now", "sleep_until"]
    assert repr(device.TimeSkill) == "<skill TimeSkill: now, sleep_until>"
    method = device.TimeSkill.now
    assert (method.__name__, method.__qualname__, repr(method)) == (
        "now",
        "TimeSkill.now",
        "<skill method TimeSkill.now>",
    )
    assert method.__doc__ == "TimeSkill.now(tz: str = 'UTC') -> str\n\nThe current time."
    assert device.describe_function("Files.read") == {
        "name": "Files.read", "signature": "(name: str) -> bytes", "doc": "Read one."
    }  # fmt: skip
    with pytest.raises(KeyError, match=r"no skill method 'Files.write'; try device.search_skills"):
        device.describe_function("Files.write")
    assert [f["name"] for f in device.search_skills("CLOCK")] == ["TimeSkill.now", "TimeSkill.sleep_until"]
    assert [f["name"] for f in device.search_skills("read")] == ["Files.read"]
    assert len(device.search_skills()) == 3

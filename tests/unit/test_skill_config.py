"""Least privilege for skills: nothing by default, shipped examples by name, no silent replacement, quotas."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_kernel.skills import loader as skill_loader
from sandbox_kernel.skills.gatekeeper import Gatekeeper
from sandbox_kernel.skills.kv_skill import KeyValueSkill, QuotaExceeded
from sandbox_kernel.skills.loader import SkillLoadError


def test_shipped_examples_load_by_name_or_path():
    skills = skill_loader.load_configured(["TimeSkill", "sandbox_kernel.skills.kv_skill"])
    assert [s.name for s in skills] == ["TimeSkill", "KeyValueSkill"]
    assert skill_loader.load_configured([]) == []


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("NoSuchSkill", "could not be imported"),
        ("os.path", "no class named ...Skill"),
        ("json.nothing", "could not be imported"),
    ],
)
def test_bad_names_are_clear(name, says):
    with pytest.raises(SkillLoadError, match=says) as caught:
        skill_loader.load_configured([name])
    assert name in str(caught.value)


def test_a_folder_skill_named_like_a_shipped_one_is_refused(tmp_path: Path):
    (tmp_path / "mine.py").write_text("class TimeSkill:\n    def now(self):\n        return 'mine'\n")
    found = skill_loader.load_configured(["TimeSkill"]) + skill_loader.load_directory(tmp_path)
    with pytest.raises(SkillLoadError) as caught:
        skill_loader.by_name(found)
    message = str(caught.value)
    assert "two skills are named 'TimeSkill'" in message and "mine.py" in message and "SandboxKernel.skills" in message


def test_key_value_store_quotas():
    store = KeyValueSkill()
    store.max_keys, store.max_total_bytes = 3, 100
    store.set("a", "x" * 40)
    store.set("a", "y" * 40)  # replacing a value counts once
    store.set("b", b"bytes")
    with pytest.raises(QuotaExceeded, match="quota of 100 bytes"):
        store.set("c", "z" * 60)
    store.set("c", 1)
    with pytest.raises(QuotaExceeded, match="3 keys"):
        store.set("d", 1)
    assert store.delete("a") is True
    store.set("d", "z" * 60)
    with pytest.raises(QuotaExceeded, match="1 to 256 characters"):
        store.set("", 1)
    with pytest.raises(KeyError):
        store.delete("missing")
    assert store.keys() == ["b", "c", "d"]


def test_described_skills_carry_each_methods_policy():
    skills = skill_loader.by_name(skill_loader.load_configured(["TimeSkill"]))
    keeper = Gatekeeper(skills, {"TimeSkill": "ask", "TimeSkill.add_days": "deny"})
    keeper.approved.add("TimeSkill.wait_then_time")  # answered "always" this session
    methods = keeper.described()["TimeSkill"]["methods"]
    assert {name: info["policy"] for name, info in methods.items()} == {
        "add_days": "deny",
        "get_current_time": "ask",
        "wait_then_time": "allow",
    }
    assert methods["add_days"]["signature"] == "(date: 'str', days: 'int' = 1) -> 'str'"

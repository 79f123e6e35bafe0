"""skills/grants.py: lasting approvals bound to a skill's code, sealed in a private file, expiring on a clock the
caller gives (no sleeps), revocable, and refused whole when anything but this module changed the file."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from sandbox_kernel.skills.grants import GrantStore, GrantStoreError, code_digest, store_name

T0 = 1_800_000_000.0
HOUR = 3600.0
CODE = "a" * 64
TARGET = "Mail.send"


def store(folder: Path, configuration: str = "skills=/srv/skills") -> GrantStore:
    return GrantStore.of(configuration, folder)


def test_a_24_hour_grant_holds_for_24_hours_in_any_kernel_and_then_stops(tmp_path):
    made = store(tmp_path).grant(TARGET, "hours", CODE, "Allow Mail.send(...)?", T0, hours=24)
    other_kernel = store(tmp_path)  # a second kernel of the same configuration reads the same file
    assert other_kernel.decision(TARGET, CODE, T0 + 23.9 * HOUR).grant == made
    late = other_kernel.decision(TARGET, CODE, T0 + 24 * HOUR)
    assert late.grant is None and not late.code_changed
    assert store(tmp_path, "another configuration").decision(TARGET, CODE, T0).grant is None


def test_always_lasts_and_is_bound_to_the_code(tmp_path):
    store(tmp_path).grant(TARGET, "always", CODE, "prompt", T0)
    assert store(tmp_path).decision(TARGET, CODE, T0 + 1e6 * HOUR).grant is not None
    changed = store(tmp_path).decision(TARGET, "b" * 64, T0)
    assert changed.grant is None and changed.code_changed
    assert store(tmp_path).decision("Mail.read", CODE, T0).grant is None


def test_a_revoked_grant_stops_at_once_and_revoking_all_empties_the_store(tmp_path):
    grants = store(tmp_path)
    first = grants.grant(TARGET, "always", CODE, "p", T0)
    grants.grant("Mail.read", "hours", CODE, "p", T0, hours=1)
    assert [g.id for g in grants.revoke(first.id)] == [first.id]
    assert grants.decision(TARGET, CODE, T0).grant is None
    assert [g.target for g in grants.grants()] == ["Mail.read"]
    assert grants.revoke("no-such-id") == []
    assert [g.target for g in grants.revoke(None)] == ["Mail.read"] and grants.grants() == []


@pytest.mark.parametrize("change", ["extend", "forge", "garbage"])
def test_a_store_changed_outside_this_module_is_refused_whole(tmp_path, change):
    grants = store(tmp_path)
    grants.grant(TARGET, "hours", CODE, "p", T0, hours=1)
    stored = json.loads(grants.path.read_text())
    if change == "extend":
        stored["grants"][0]["expires_at"] = T0 + 1e9  # a longer grant than the person gave
    elif change == "forge":
        stored["grants"].append({**stored["grants"][0], "id": "f0f0f0f0f0f0", "target": "Bank.pay"})
    grants.path.write_text("{not json" if change == "garbage" else json.dumps(stored))
    with pytest.raises(GrantStoreError, match=r"does not match its seal .* no approval in it applies"):
        grants.decision(TARGET, CODE, T0)
    grants.revoke(None)  # what the message offers: the store goes, and the next grant starts a new one
    assert grants.grants() == []


def test_the_store_and_its_key_are_private(tmp_path):
    grants = store(tmp_path / "data")
    grants.grant(TARGET, "always", CODE, "p", T0)
    for path in (grants.path, grants.key_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    assert len(grants.key_path.read_bytes()) == 32
    grants.key_path.write_bytes(b"short")
    with pytest.raises(GrantStoreError, match="is not the approvals' key"):
        grants.grants()


def test_bad_scopes_and_durations_are_refused(tmp_path):
    with pytest.raises(ValueError, match="scope 'session'"):
        store(tmp_path).grant(TARGET, "session", CODE, "p", T0)
    with pytest.raises(ValueError, match="hours 0"):
        store(tmp_path).grant(TARGET, "hours", CODE, "p", T0, hours=0)


def test_the_codes_digest_follows_every_byte_of_every_file(tmp_path):
    one, two = tmp_path / "mail.py", tmp_path / "helpers.py"
    one.write_text("class MailSkill: ...\n")
    two.write_text("X = 1\n")
    before = code_digest([one, two])
    assert code_digest([two, one]) == before
    two.write_text("X = 2\n")
    assert code_digest([one, two]) != before
    assert store_name("a") != store_name("b") and store_name("a").startswith("approvals-")


def test_every_store_of_a_folder_is_found_for_listing(tmp_path):
    store(tmp_path, "one").grant(TARGET, "always", CODE, "p", T0)
    store(tmp_path, "two").grant(TARGET, "always", CODE, "p", T0)
    assert sorted(s.path for s in GrantStore.every(tmp_path)) == sorted([store(tmp_path, "one").path,
                                                                        store(tmp_path, "two").path])  # fmt: skip


def approvals_command(*words: str) -> tuple[int, str, str]:
    """`sandbox-kernel approvals ...` as its own process: exit status, stdout, stderr."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "sandbox_kernel", "approvals", *words], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def test_the_command_lists_and_revokes_one_or_all(tmp_path):
    import time

    kept = store(tmp_path, "one").grant(TARGET, "hours", CODE, "p", time.time(), hours=24)
    gone = store(tmp_path, "two").grant("Mail.read", "always", CODE, "p", time.time())
    status, out, _ = approvals_command("list", "--folder", str(tmp_path))
    assert status == 0 and f"{kept.id}  {TARGET}  24.0 h left" in out and f"{gone.id}  Mail.read  always" in out
    assert approvals_command("revoke", gone.id, "--folder", str(tmp_path))[:2] == (0, f"revoked {gone.id} Mail.read\n")
    assert store(tmp_path, "two").grants() == [] and store(tmp_path, "one").grants() == [kept]
    status, _, err = approvals_command("revoke", "nope", "--folder", str(tmp_path))
    assert status == 1 and "no approval has the id 'nope'" in err
    assert approvals_command("revoke", "--folder", str(tmp_path))[0] == 2  # neither an id nor --all
    status, out, _ = approvals_command("revoke", "--all", "--folder", str(tmp_path))
    assert status == 0 and out.endswith("Every lasting approval is revoked.\n") and GrantStore.every(tmp_path) == []
    assert approvals_command("list", "--folder", str(tmp_path))[1] == f"No lasting approvals in {tmp_path}.\n"

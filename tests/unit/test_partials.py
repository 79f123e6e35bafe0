"""The kernel removes only its own sandbox's files written aside (sandbox/partials.py): what Deno says is untrusted."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision
from sandbox_kernel.sandbox.mounts import Mount
from sandbox_kernel.sandbox.partials import PartialFiles

TAG = "a1b2c3"


def files(tmp_path: Path) -> tuple[PartialFiles, Path, Path]:
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir()
    ro.mkdir()
    return PartialFiles([Mount(rw, "/rw", True), Mount(ro, "/ro", False)], TAG), rw, ro


def test_its_own_file_written_aside_is_removed_in_a_subfolder_too(tmp_path):
    partials, rw, _ = files(tmp_path)
    (rw / "sub").mkdir()
    for name in (f"t.sandbox-partial-{TAG}-0.csv", f"sub/sandbox-partial-{TAG}-w1.tsv"):
        (rw / name).write_text("part")
        partials.note({"event": "partial", "mount": 0, "path": name.split("/")})
    assert len(partials.remove()) == 2
    assert sorted(p.name for p in rw.rglob("*")) == ["sub"]


def test_anything_else_it_names_stays(tmp_path):
    partials, rw, ro = files(tmp_path)
    outside = tmp_path / f"x.sandbox-partial-{TAG}-0.csv"
    outside.write_text("keep")
    (rw / f"link.sandbox-partial-{TAG}-1.csv").symlink_to(outside)  # a link named like one: the link is not followed
    (rw / "folder").symlink_to(tmp_path)  # a linked folder on the way: not followed
    (rw / f"d.sandbox-partial-{TAG}-2.csv").mkdir()  # not a regular file
    (rw / "data.csv").write_text("keep")
    (rw / "t.sandbox-partial-other-3.csv").write_text("keep")  # another sandbox's
    (ro / f"t.sandbox-partial-{TAG}-4.csv").write_text("keep")  # a read-only mount's
    for event in [
        {"mount": 0, "path": [f"link.sandbox-partial-{TAG}-1.csv"]},
        {"mount": 0, "path": ["folder", outside.name]},
        {"mount": 0, "path": ["..", outside.name]},
        {"mount": 0, "path": [f"../{outside.name}"]},
        {"mount": 0, "path": [f"d.sandbox-partial-{TAG}-2.csv"]},
        {"mount": 0, "path": ["data.csv"]},
        {"mount": 0, "path": ["t.sandbox-partial-other-3.csv"]},
        {"mount": 1, "path": [f"t.sandbox-partial-{TAG}-4.csv"]},
        {"mount": 2, "path": [f"t.sandbox-partial-{TAG}-4.csv"]},
        {"mount": "0", "path": "x"},
        {"mount": 0, "path": [3]},
    ]:
        partials.note({"event": "partial", **event})
    assert partials.remove() == []
    assert outside.read_text() == "keep"
    assert (rw / "data.csv").read_text() == (rw / "t.sandbox-partial-other-3.csv").read_text() == "keep"
    assert (ro / f"t.sandbox-partial-{TAG}-4.csv").read_text() == "keep"
    assert (rw / f"d.sandbox-partial-{TAG}-2.csv").is_dir()
    assert (rw / f"link.sandbox-partial-{TAG}-1.csv").is_symlink()


def test_a_long_session_forgets_those_renamed_over_their_name(tmp_path):
    partials = files(tmp_path)[0]
    for n in range(1000):
        partials.note({"event": "partial", "mount": 0, "path": [f"t.sandbox-partial-{TAG}-{n:x}.csv"]})
    assert len(partials.places) <= 257


def made_new(rw: Path, name: str, n: int) -> tuple[dict, Path, Path]:
    """An empty file made new at `name` and its file written aside, with the event that tells both."""
    new, aside = rw / name, rw / f"{Path(name).stem}.sandbox-partial-{TAG}-{n}{Path(name).suffix}"
    new.touch()
    aside.write_text("part")
    info = new.stat()
    made = {"name": name, "dev": info.st_dev, "ino": info.st_ino}
    return {"event": "partial", "mount": 0, "path": [aside.name], "made": made}, new, aside


def test_a_name_made_new_goes_with_its_file_written_aside_while_still_that_empty_file(tmp_path):
    partials, rw, _ = files(tmp_path)
    event, new, aside = made_new(rw, "new.csv", 0)
    partials.note(event)
    assert sorted(partials.remove()) == sorted([str(aside), str(new)])
    assert list(rw.iterdir()) == []


def test_a_name_made_new_stays_unless_it_is_still_that_empty_file_beside_its_aside_file(tmp_path):
    partials, rw, _ = files(tmp_path)
    written, w_new, _ = made_new(rw, "written.csv", 0)
    w_new.write_text("someone wrote this meanwhile")  # not empty: kept
    other, o_new, _ = made_new(rw, "other.csv", 1)
    other["made"]["ino"] += 1  # another file than the one made: kept
    replaced, r_new, _ = made_new(rw, "replaced.csv", 2)
    r_new.unlink()
    r_new.symlink_to(tmp_path / "elsewhere.csv")  # a link now: not followed, kept
    (tmp_path / "elsewhere.csv").touch()
    published, p_new, p_aside = made_new(rw, "published.csv", 3)
    p_aside.unlink()  # renamed over its name already (here: gone): its name is whole, kept
    bad = [
        {**made_new(rw, f"bad{n}.csv", 4 + n)[0], "made": made}
        for n, made in enumerate(
            [{"name": "../x.csv", "dev": 0, "ino": 0}, {"name": "bad0.csv", "dev": True, "ino": 1}, "bad1.csv"]
        )
    ]
    for event in [written, other, replaced, published, *bad]:
        partials.note(event)
    removed = partials.remove()
    assert all(".sandbox-partial-" in p for p in removed), removed  # only the files written aside went
    assert w_new.read_text() == "someone wrote this meanwhile"
    assert o_new.exists() and r_new.is_symlink() and (tmp_path / "elsewhere.csv").exists() and p_new.exists()
    assert sorted(p.name for p in rw.iterdir() if ".sandbox-partial-" not in p.name) == sorted(
        ["written.csv", "other.csv", "replaced.csv", "published.csv", "bad0.csv", "bad1.csv", "bad2.csv"]
    )


def told(rw: Path, aside: str, name: str) -> tuple[dict, Path]:
    """An event for the file written aside `aside` that says `name` (an empty file there) was made new."""
    (rw / aside).write_text("part")
    (rw / name).touch()
    info = (rw / name).stat()
    made = {"name": name, "dev": info.st_dev, "ino": info.st_ino}
    return {"event": "partial", "mount": 0, "path": [aside], "made": made}, rw / name


def test_only_the_name_its_aside_file_is_named_from_goes_and_never_a_guarded_one(tmp_path):
    partials, rw, _ = files(tmp_path)
    cases = [
        (f"new.sandbox-partial-{TAG}-0.csv", "other.csv"),  # another empty file in the folder
        (f"sandbox-partial-{TAG}-1.csv", "any.csv"),  # the bare fallback: any name of that suffix maps to it
        (f"x.sandbox-partial-{TAG}-2.partial", "x"),  # "x" and "x.partial" both map to it
        (f"CMakeLists.sandbox-partial-{TAG}-3.txt", "CMakeLists.txt"),  # protected at the top (--deny-write)
        (f".env.sandbox-partial-{TAG}-4.local", ".env.local"),  # protected (.env.*)
        (f"CMakePresets.sandbox-partial-{TAG}-5.json", "CMakePresets.json"),
    ]
    kept = []
    for aside, name in cases:
        event, path = told(rw, aside, name)
        partials.note(event)
        kept.append(path)
    control, gone = told(rw, f"table.sandbox-partial-{TAG}-6.csv", "table.csv")
    partials.note(control)
    removed = partials.remove()
    asides = [str(rw / aside) for aside, _ in cases] + [str(rw / f"table.sandbox-partial-{TAG}-6.csv")]
    assert sorted(removed) == sorted([*asides, str(gone)])  # the control: the name it derives from goes
    assert all(path.exists() for path in kept), sorted(p.name for p in rw.iterdir())
    assert sorted(p.name for p in rw.iterdir()) == sorted(path.name for path in kept)


# (name, host_writes, the name a `made` for its aside file may be): what write_policy.ts partialName makes of each
# is read from the TypeScript itself, so the two languages cannot drift apart.
NAMED = [
    ("a.csv", "data", "a.csv"),
    ("a.b.tsv", "data", "a.b.tsv"),
    (".hidden.csv", "data", None),  # a dot name is not a data name: the bare fallback
    (".hidden.csv", "any", ".hidden.csv"),
    ("x" * 190 + ".csv", "data", None),  # too long: the bare fallback
    ("Makefile", "data", None),  # not a data name: the bare fallback
    ("notes", "any", None),  # no suffix: ".partial", as for "notes.partial"
    ("x.partial", "any", None),
]


def partial_names(tags: list[str]) -> list[list[str]]:
    """write_policy.ts partialName's answer for each of NAMED, with each tag."""
    calls = [[[name], tag, mode] for name, mode, _ in NAMED for tag in tags]
    script = (
        'import { partialName } from "./write_policy.ts";\n'
        f"const calls = {json.dumps(calls)};\n"
        "console.log(JSON.stringify(calls.map(([p, t, m]) => partialName(p, t, m))));"
    )
    env = {**os.environ, "DENO_DIR": str(provision.deno_dir()), "NO_COLOR": "1"}
    done = subprocess.run(
        [paths.deno_executable(), "eval", script], cwd=paths.host_dir(), env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_the_kernel_knows_every_name_partial_name_makes_and_what_it_is_made_from(tmp_path):
    partials = files(tmp_path)[0]
    tags = [f"{TAG}-0", f"{TAG}-z9", f"{TAG}-w3"]  # file_service.ts aside's, rwfs.ts copyOut's
    made = iter(partial_names(tags))
    for name, _, derived in NAMED:
        for _ in tags:
            aside = next(made)[-1]
            assert partials.name.search(aside), aside
            assert partials._made_from(aside) == derived, (name, aside)
    other = partial_names(["other1-0"])
    assert not any(partials.name.search(p[-1]) for p in other), other  # another sandbox's tag: never this one's

"""SandboxKernel.packages unpacked once on the host (packages/unpacked.py): what a wheel may hold, the record of what
pip resolved, the manifest, and a damaged folder found and unpacked again."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import stat
import zipfile
from pathlib import Path

import pytest

from sandbox_kernel.packages import unpacked


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(folder: Path, name: str = "demo", files: dict[str, bytes] | None = None, record: bool = True) -> Path:
    """A wheel of `files` (default: a module `name` with VALUE) with a RECORD hashing every file."""
    dist = f"{name}-1.0"
    files = {
        **(files if files is not None else {f"{name}/__init__.py": f"VALUE = '{name}'\n".encode()}),
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    lines = [f"{path},{_digest(data)},{len(data)}" for path, data in files.items()]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        if record:
            zf.writestr(f"{dist}.dist-info/RECORD", "\n".join([*lines, f"{dist}.dist-info/RECORD,,"]) + "\n")
    path = folder / f"{dist}-py3-none-any.whl"
    path.write_bytes(buffer.getvalue())
    return path


def resolved(folder: Path) -> Path:
    """`folder` as pip's resolution leaves it: the wheels and the record of their sha256."""
    unpacked.record_wheels(folder)
    return folder


def said() -> list[str]:
    return []


def test_wheels_are_unpacked_once_and_the_folder_is_then_reused(tmp_path):
    wheel(tmp_path, "alpha")
    wheel(tmp_path, "beta")
    resolved(tmp_path)
    lines: list[str] = []
    site = unpacked.ensure_site(tmp_path, True, lines.append)
    assert (site / "alpha" / "__init__.py").read_text() == "VALUE = 'alpha'\n"
    assert (site / "beta-1.0.dist-info" / "RECORD").is_file()
    assert lines == [f"sandbox-kernel: unpacking SandboxKernel.packages into {site} (once per set of packages)"]
    manifest = json.loads((tmp_path / unpacked.MANIFEST).read_text())["files"]
    assert manifest["alpha/__init__.py"] == [16, hashlib.sha256(b"VALUE = 'alpha'\n").hexdigest()]
    before = (site.stat().st_ino, (site / "alpha" / "__init__.py").stat().st_mtime_ns)
    assert unpacked.ensure_site(tmp_path, True, lines.append) == site
    assert unpacked.ensure_site(tmp_path, False, lines.append) == site
    assert (site.stat().st_ino, (site / "alpha" / "__init__.py").stat().st_mtime_ns) == before
    assert len(lines) == 1  # nothing unpacked again


@pytest.mark.parametrize(
    ("member", "why"),
    [
        ("../evil.py", "has an empty, '.' or '..' part"),
        ("demo/../../evil.py", "has an empty, '.' or '..' part"),
        ("/etc/evil.py", "is an absolute path"),
        ("C:/evil.py", "is an absolute path"),
        ("demo\\..\\evil.py", "is an absolute path or not a plain relative path"),
    ],
)
def test_a_member_outside_the_folder_is_refused(tmp_path, member, why):
    wheel(tmp_path, files={member: b"x = 1\n"})
    resolved(tmp_path)
    with pytest.raises(
        unpacked.UnpackError, match=r"demo-1.0-py3-none-any.whl is refused: .*" + why.replace(".", r"\.")
    ):
        unpacked.ensure_site(tmp_path, True, said().append)
    assert not (tmp_path / unpacked.SITE).exists() and not (tmp_path / unpacked.MANIFEST).exists()
    assert not (tmp_path.parent / "evil.py").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".site-")] == []  # no staging left behind


def test_a_symbolic_link_in_a_wheel_is_refused(tmp_path):
    path = wheel(tmp_path)
    with zipfile.ZipFile(path, "a") as zf:
        link = zipfile.ZipInfo("demo/passwd")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
    resolved(tmp_path)
    with pytest.raises(unpacked.UnpackError, match=r"'demo/passwd' is a symbolic link or a special file"):
        unpacked.ensure_site(tmp_path, True, said().append)


def test_a_file_that_does_not_match_the_wheels_record_is_refused(tmp_path):
    path = wheel(tmp_path)
    data = zipfile.ZipFile(path).read("demo-1.0.dist-info/RECORD")
    tampered = io.BytesIO()
    with zipfile.ZipFile(path) as old, zipfile.ZipFile(tampered, "w") as new:
        for info in old.infolist():
            new.writestr(info, b"VALUE = 'evil'\n" if info.filename == "demo/__init__.py" else old.read(info))
    path.write_bytes(tampered.getvalue())
    assert zipfile.ZipFile(path).read("demo-1.0.dist-info/RECORD") == data
    resolved(tmp_path)
    with pytest.raises(
        unpacked.UnpackError, match=r"'demo/__init__.py' does not match its sha256 in the wheel's RECORD"
    ):
        unpacked.ensure_site(tmp_path, True, said().append)


def test_a_file_the_record_does_not_name_and_a_wheel_without_a_record_are_refused(tmp_path):
    path = wheel(tmp_path)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("demo/extra.py", "x = 1\n")
    resolved(tmp_path)
    with pytest.raises(unpacked.UnpackError, match=r"'demo/extra.py' has no sha256 .* in the wheel's RECORD"):
        unpacked.ensure_site(tmp_path, True, said().append)
    path.unlink()
    wheel(tmp_path, record=False)
    resolved(tmp_path)
    with pytest.raises(unpacked.UnpackError, match=r"has 0 .dist-info/RECORD files, not one"):
        unpacked.ensure_site(tmp_path, True, said().append)


def test_a_wheel_changed_since_pip_resolved_it_is_reported_as_damaged(tmp_path):
    path = wheel(tmp_path)
    resolved(tmp_path)
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(unpacked.WheelsDamaged, match=r"demo-1.0-py3-none-any.whl in .* changed since pip resolved"):
        unpacked.ensure_site(tmp_path, True, said().append)
    (tmp_path / "planted-1.0-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(unpacked.WheelsDamaged, match=r"are not those pip resolved"):
        unpacked.ensure_site(tmp_path, True, said().append)


def test_wheels_that_unpack_to_more_than_the_limit_are_refused(tmp_path, monkeypatch):
    wheel(tmp_path, files={"demo/big.bin": b"\0" * 5000})
    resolved(tmp_path)
    monkeypatch.setattr(unpacked, "MAX_UNPACKED_BYTES", 4096)
    with pytest.raises(unpacked.UnpackError, match=r"unpack to more than 0 MiB; demo-1.0-py3-none-any.whl is past"):
        unpacked.ensure_site(tmp_path, True, said().append)


@pytest.mark.parametrize(
    ("damage", "found_by_sizes", "problem"),
    [
        (lambda site: (site / "demo" / "__init__.py").write_text("VALUE = 'evil'\n"), False, "changed"),
        (lambda site: (site / "demo" / "__init__.py").write_text("VALUE = 'evil!'\n"), True, "changed size"),
        (lambda site: (site / "demo" / "planted.py").write_text("x = 1\n"), True, "was added"),
        (lambda site: (site / "demo" / "__init__.py").unlink(), True, "is missing"),
        (lambda site: (site / "demo" / "link.py").symlink_to("/etc/passwd"), True, "is not a plain file"),
    ],
    ids=["same-size", "resized", "added", "removed", "symlink"],
)
def test_a_damaged_folder_is_found_and_unpacked_again(tmp_path, damage, found_by_sizes, problem):
    wheel(tmp_path)
    resolved(tmp_path)
    site = unpacked.ensure_site(tmp_path, True, said().append)
    damage(site)
    lines: list[str] = []
    unpacked.ensure_site(tmp_path, False, lines.append)  # the check of every start: file names, kinds and sizes
    assert bool(lines) == found_by_sizes
    unpacked.ensure_site(tmp_path, True, lines.append)  # a kernel's first start: contents too
    assert len(lines) == 1 and "differ from what was unpacked (demo/" in lines[0] and problem in lines[0], lines
    assert lines[0].endswith(": unpacking them again")
    assert (site / "demo" / "__init__.py").read_text() == "VALUE = 'demo'\n"
    assert sorted(p.name for p in (site / "demo").iterdir()) == ["__init__.py"]
    assert unpacked.folder_problems(site, json.loads((tmp_path / unpacked.MANIFEST).read_text())["files"], True) == []


def test_a_folder_without_its_manifest_is_unpacked_again(tmp_path):
    wheel(tmp_path)
    resolved(tmp_path)
    site = unpacked.ensure_site(tmp_path, True, said().append)
    (site / "demo" / "planted.py").write_text("x = 1\n")
    (tmp_path / unpacked.MANIFEST).unlink()  # as an unpacking that stopped half-way leaves it
    lines: list[str] = []
    unpacked.ensure_site(tmp_path, False, lines.append)
    assert lines == [f"sandbox-kernel: unpacking SandboxKernel.packages into {site} (once per set of packages)"]
    assert not (site / "demo" / "planted.py").exists()


def test_the_worker_mounts_the_folder_where_the_guest_glue_looks_for_it():
    root = Path(__file__).resolve().parents[2] / "host_ts"
    mounted = re.search(r'export const PACKAGES_SITE = "([^"]+)"', (root / "snapshot_layout.ts").read_text())
    guarded = re.search(r'^PACKAGES_SITE = "([^"]+)"', (root / "guest/sandbox_guest/guards.py").read_text(), re.M)
    assert mounted and guarded and mounted[1] == guarded[1] == "/lib/sandbox-packages"


def fake_compiler(change: str = ""):
    """A stand-in for the guest's compiler: writes __pycache__/X.cpython-314.pyc beside each module, and with
    `change` also rewrites that file (what the real one must never do)."""

    def compile_folder(folder: Path) -> bool:
        for module in list(folder.rglob("*.py")):
            (module.parent / "__pycache__").mkdir(exist_ok=True)
            (module.parent / "__pycache__" / f"{module.stem}.cpython-314.pyc").write_bytes(b"pyc")
        if change:
            (folder / change).write_text("changed = True\n")
        return True

    return compile_folder


def test_bytecode_compiled_at_unpacking_is_in_the_manifest(tmp_path):
    wheel(tmp_path)
    resolved(tmp_path)
    site = unpacked.ensure_site(tmp_path, True, said().append, fake_compiler())
    manifest = json.loads((tmp_path / unpacked.MANIFEST).read_text())["files"]
    assert manifest["demo/__pycache__/__init__.cpython-314.pyc"] == [3, hashlib.sha256(b"pyc").hexdigest()]
    (site / "demo" / "__pycache__" / "__init__.cpython-314.pyc").write_bytes(b"evi")  # damaged bytecode is found
    lines: list[str] = []
    unpacked.ensure_site(tmp_path, True, lines.append, fake_compiler())
    assert "demo/__pycache__/__init__.cpython-314.pyc changed" in lines[0], lines


def test_a_compiler_that_changes_a_module_is_refused(tmp_path):
    wheel(tmp_path)
    resolved(tmp_path)
    with pytest.raises(unpacked.UnpackError, match=r"compiling changed the unpacked files: demo/extra.py was added"):
        unpacked.ensure_site(tmp_path, True, said().append, fake_compiler("demo/extra.py"))
    assert not (tmp_path / unpacked.SITE).exists()


def test_a_compiler_that_fails_leaves_the_modules_uncompiled_and_says_so(tmp_path):
    wheel(tmp_path)
    resolved(tmp_path)

    def broken(folder: Path) -> bool:
        raise RuntimeError("Deno exited with code 1")

    lines: list[str] = []
    site = unpacked.ensure_site(tmp_path, True, lines.append, broken)
    assert lines[1] == (
        "sandbox-kernel: SandboxKernel.packages not compiled to bytecode (Deno exited with code 1): sandboxes "
        "compile them"
    )
    assert (site / "demo" / "__init__.py").is_file() and not (site / "demo" / "__pycache__").exists()


def test_the_compiler_may_write_only_the_folder_it_compiles(tmp_path):
    from sandbox_kernel import paths
    from sandbox_kernel.sandbox import bytecode, provision

    argv = bytecode.compile_argv(tmp_path / "site")
    pyodide = paths.pyodide_dir(provision.deno_dir())
    assert f"--allow-write={tmp_path / 'site'}" in argv
    assert f"--allow-read={paths.host_dir()},{pyodide},{tmp_path / 'site'}" in argv
    assert not [a for a in argv if a.startswith(("--allow-all", "-A", "--allow-net", "--allow-run", "--allow-env"))]
    assert argv[-2:] == [str(paths.host_dir() / "compile_site.ts"), str(tmp_path / "site")]


def test_bytecode_a_wheel_ships_may_be_made_again(tmp_path):
    wheel(tmp_path, files={"demo/__init__.py": b"x = 1\n", "demo/__pycache__/__init__.cpython-314.pyc": b"old"})
    resolved(tmp_path)
    unpacked.ensure_site(tmp_path, True, said().append, fake_compiler())  # writes b"pyc" over the wheel's b"old"
    manifest = json.loads((tmp_path / unpacked.MANIFEST).read_text())["files"]
    assert manifest["demo/__pycache__/__init__.cpython-314.pyc"] == [3, hashlib.sha256(b"pyc").hexdigest()]


def test_bytecode_the_record_does_not_hash_is_left_out(tmp_path):
    path = wheel(tmp_path)
    with zipfile.ZipFile(path, "a") as zf:  # PEP 376 lets RECORD omit the hash of .pyc files
        zf.writestr("demo/__pycache__/__init__.cpython-314.pyc", b"unverified")
    resolved(tmp_path)
    site = unpacked.ensure_site(tmp_path, True, said().append)
    assert not (site / "demo" / "__pycache__").exists() and (site / "demo" / "__init__.py").is_file()

"""`sandbox-kernel install` registers a working, complete kernelspec."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.timeout(600)


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=500, stdin=subprocess.DEVNULL
    )


def install(prefix: Path, *args: str) -> Path:
    proc = run(str(BIN / "sandbox-kernel"), "install", "--prefix", str(prefix), *args)
    assert proc.returncode == 0, proc.stderr
    assert "Installed kernelspec pyodide-sandbox (Python 3 (Pyodide sandbox))" in proc.stdout
    return prefix / "share" / "jupyter" / "kernels" / "pyodide-sandbox"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (which must come first)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR", f"{path.name} has no IHDR first"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_install_prefix_writes_kernelspec(tmp_path: Path) -> None:
    folder = install(tmp_path, "--no-fetch")
    assert sorted(p.name for p in folder.iterdir()) == [
        "kernel.json",
        "logo-32x32.png",
        "logo-64x64.png",
        "logo-svg.svg",
    ]
    spec = json.loads((folder / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (Pyodide sandbox)"
    assert spec["language"] == "python"
    python, *rest = spec["argv"]
    # `-c` with the working folder taken off sys.path first (not `-m`, which would import from the notebook's folder)
    assert (
        rest[0] == "-c"
        and rest[1].startswith("import os, sys; sys.path[:] = ")
        and rest[2:] == ["-f", "{connection_file}"]
    )
    assert Path(python).is_absolute()
    # The argv's Python is this environment's Python, and it can import the kernel.
    probe = run(python, "-c", "import sys, sandbox_kernel; print(sys.prefix)")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == sys.prefix
    assert png_size(folder / "logo-32x32.png") == (32, 32)
    assert png_size(folder / "logo-64x64.png") == (64, 64)
    assert ET.parse(folder / "logo-svg.svg").getroot().tag in {"svg", "{http://www.w3.org/2000/svg}svg"}


def test_jupyter_kernelspec_list_finds_it(tmp_path: Path) -> None:
    folder = install(tmp_path, "--no-fetch")
    proc = run(str(BIN / "jupyter"), "kernelspec", "list", env={"JUPYTER_PATH": str(tmp_path / "share" / "jupyter")})
    assert proc.returncode == 0, proc.stderr
    listed = dict(line.split(None, 1) for line in proc.stdout.splitlines()[1:] if line.strip())
    assert Path(listed["pyodide-sandbox"].strip()) == folder


def test_install_fetches_by_default(tmp_path: Path) -> None:
    """Without --no-fetch, install also makes sure Pyodide and the guest wheels are cached."""
    proc = run(str(BIN / "sandbox-kernel"), "install", "--prefix", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "Pyodide cached in" in proc.stdout
    assert (tmp_path / "share" / "jupyter" / "kernels" / "pyodide-sandbox" / "kernel.json").is_file()


def home_env(tmp: Path) -> dict[str, str]:
    """An environment whose home, XDG folders and Jupyter folders are all under `tmp` (nothing of the real user)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_", "SANDBOX_KERNEL_", "XDG_"))}
    env.update(
        HOME=str(tmp / "home"), XDG_CACHE_HOME=str(tmp / "xdg-cache"), XDG_DATA_HOME=str(tmp / "xdg-data"),
        JUPYTER_PLATFORM_DIRS="0",
    )  # fmt: skip
    (tmp / "home").mkdir()
    return env


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "sandbox-kernel"), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_uninstall_removes_the_kernelspec_and_on_request_the_cache_key_and_audit_log(tmp_path: Path) -> None:
    env = home_env(tmp_path)
    prefix = tmp_path / "prefix"
    for where in (["--prefix", str(prefix)], ["--user"]):
        assert cli(env, "install", *where, "--no-fetch").returncode == 0
    user_spec = tmp_path / "xdg-data" / "jupyter" / "kernels" / "pyodide-sandbox"
    prefix_spec = prefix / "share" / "jupyter" / "kernels" / "pyodide-sandbox"
    assert (user_spec / "kernel.json").is_file() and (prefix_spec / "kernel.json").is_file()
    cache = tmp_path / "xdg-cache" / "sandbox-kernel"
    (cache / "deno" / "npm").mkdir(parents=True)
    (cache / "snapshots").mkdir()
    (cache / "snapshots" / "pyodide.bin").write_bytes(b"x")
    # The key and a rotated audit log, made by the kernel's own code in that environment.
    made = subprocess.run(
        [sys.executable, "-c", "from sandbox_kernel.checkpoints import file; from sandbox_kernel.skills import audit\n"
         "file.key(); log = audit.AuditLog(audit.default_path(), 100, 3)\nfor n in range(9): log.record(n=n)\n"
         "print(file.key_path()); print(audit.default_path())"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    key, log = (Path(line) for line in made.stdout.split())
    assert key.is_file() and log.with_name("audit.jsonl.2").is_file() and key.parent == log.parent

    only_prefix = cli(env, "uninstall", "--prefix", str(prefix))
    assert only_prefix.returncode == 0, only_prefix.stderr
    assert only_prefix.stdout == f"removed kernelspec {prefix_spec}\n"
    assert not prefix_spec.exists() and user_spec.is_dir() and cache.is_dir() and key.is_file() and log.is_file()

    everything = cli(env, "uninstall", "--user", "--all")  # (without a place: every one, this venv's too)
    assert everything.returncode == 0, everything.stderr
    assert f"removed kernelspec {user_spec}\n" in everything.stdout
    assert f"removed the cache {cache}\n" in everything.stdout
    assert (
        f"removed the checkpoint key (checkpoints saved with it can no longer be restored) {key}" in everything.stdout
    )
    assert f"removed the audit log {log}\n" in everything.stdout and f"{log}.2\n" in everything.stdout
    assert not user_spec.exists() and not cache.exists() and not key.exists() and not log.parent.exists()
    assert (tmp_path / "xdg-cache").is_dir()  # only the kernel's own folder went
    listed = run(str(BIN / "jupyter"), "kernelspec", "list", env=env)
    assert listed.returncode == 0 and str(tmp_path) not in listed.stdout

    again = cli(env, "uninstall", "--user")
    assert again.returncode == 1
    assert f"sandbox-kernel uninstall: kernelspec pyodide-sandbox: not in {user_spec.parent}\n" in again.stderr


def test_uninstall_keeps_a_cache_folder_that_holds_other_files(tmp_path: Path) -> None:
    """SANDBOX_KERNEL_CACHE set to a folder of the user's own (here, the home folder): nothing in it is removed."""
    env = home_env(tmp_path)
    home = tmp_path / "home"
    (home / "deno").mkdir()
    (home / "notes.txt").write_text("mine")
    for cache in (home, tmp_path / "other"):
        cache.mkdir(exist_ok=True)
        (cache / "notes.txt").write_text("mine")
        done = cli({**env, "SANDBOX_KERNEL_CACHE": str(cache)}, "uninstall", "--user", "--cache")
        assert done.returncode == 1
        assert f"sandbox-kernel uninstall: the cache was kept: {cache} " in done.stderr
        assert (cache / "notes.txt").read_text() == "mine"
    assert (
        "is your home folder or holds it"
        in cli({**env, "SANDBOX_KERNEL_CACHE": str(home)}, "uninstall", "--user", "--cache").stderr
    )
    assert (home / "deno").is_dir()


def test_the_page_policy_is_installed_only_when_asked_read_by_jupyter_server_and_uninstalled(tmp_path: Path) -> None:
    """--page-policy drops a config file in the Jupyter config folder the place names; a Jupyter server started
    there reads its Content-Security-Policy; uninstall removes it (and only it)."""
    from sandbox_kernel.jupyter.page_policy import LAB_CONFIG, LAB_TOKEN_SCRIPT, policy

    env = home_env(tmp_path)
    prefix = tmp_path / "prefix"
    user_file = tmp_path / "home" / ".jupyter" / "jupyter_server_config.d" / "sandbox_kernel_page_policy.json"
    prefix_file = prefix / "etc" / "jupyter" / "jupyter_server_config.d" / "sandbox_kernel_page_policy.json"
    lab_files = [base / "labconfig" / "page_config.d" / "sandbox_kernel_page_policy.json" for base in
                 (prefix / "etc" / "jupyter", tmp_path / "home" / ".jupyter")]  # fmt: skip
    plain = cli(env, "install", "--user", "--no-fetch")
    assert plain.returncode == 0, plain.stderr
    assert not user_file.parent.exists() and "page policy" not in plain.stdout
    for where, path, lab_file in zip(
        (["--prefix", str(prefix)], ["--user"]), (prefix_file, user_file), lab_files, strict=True
    ):
        done = cli(env, "install", *where, "--no-fetch", "--page-policy")
        assert done.returncode == 0, done.stderr
        assert "Installed the page policy (a Content-Security-Policy on every page" in done.stdout
        assert f"in {path}, {lab_file}; restart Jupyter" in done.stdout
        assert json.loads(lab_file.read_text()) == LAB_CONFIG
        assert json.loads(path.read_text()) == {
            "ServerApp": {"jpserver_extensions": {"sandbox_kernel.jupyter.page_policy": True}}
        }
    other = user_file.parent / "mine.json"
    other.write_text("{}")

    assert served_policy(env) == policy()
    assert policy().split("; ")[1] == f"script-src 'self' 'unsafe-eval' {LAB_TOKEN_SCRIPT}"  # not 'unsafe-inline'

    removed = "removed the page policy (restart Jupyter for its pages to lose it)"
    only_prefix = cli(env, "uninstall", "--prefix", str(prefix))
    assert f"{removed} {prefix_file}\n{removed} {lab_files[0]}\n" in only_prefix.stdout
    assert not prefix_file.exists() and not lab_files[0].exists() and user_file.is_file() and lab_files[1].is_file()
    user = cli(env, "uninstall", "--user")  # (not without a place: that would take this venv's kernelspec too)
    assert user.returncode == 0, user.stderr
    assert f"{removed} {user_file}\n{removed} {lab_files[1]}\n" in user.stdout
    assert not user_file.exists() and not lab_files[1].exists() and other.read_text() == "{}"
    assert served_policy(env) != policy()


SERVED_POLICY = """
import sys
from jupyter_server.serverapp import ServerApp
from tornado.httputil import HTTPServerRequest
from jupyter_server.base.handlers import JupyterHandler

app = ServerApp()
app.initialize(argv=["--ServerApp.open_browser=False"])
request = HTTPServerRequest(method="GET", uri="/lab", connection=type("C", (), {"set_close_callback": lambda *a: 0})())
handler = JupyterHandler(app.web_app, request)
print("POLICY=" + handler._headers["Content-Security-Policy"])
"""


def served_policy(env: dict[str, str]) -> str:
    """The Content-Security-Policy a Jupyter server started in `env` puts on its pages (its handler's headers)."""
    proc = subprocess.run(
        [sys.executable, "-c", SERVED_POLICY],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.rpartition("POLICY=")[2].strip()

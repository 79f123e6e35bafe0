"""The kernel's settings as keywords of the agent API: every trait taken, checked by its trait, passed exactly.

No kernel starts here: making a Sandbox only checks its settings (tests/test_agent.py starts real ones).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from traitlets import Bool, Dict, Enum, Float, Int, List, TraitType, Unicode

from sandbox_kernel.client import keywords, keywords_doc
from sandbox_kernel.client.agent import API_OPTIONS, AsyncSandbox, SandboxSettingsError
from sandbox_kernel.client.kernel_settings import KernelSettings
from sandbox_kernel.client.sync_sandbox import Sandbox
from sandbox_kernel.jupyter import config_doc
from sandbox_kernel.jupyter.app import SandboxKernelApp
from sandbox_kernel.jupyter.kernel import SandboxKernel

SETTINGS = keywords.setting_traits()


def other_value(trait: TraitType[Any, Any]) -> Any:
    """A valid value of the trait that is not its default (a new kind of trait fails here: add it)."""
    if isinstance(trait, Enum):
        return [v for v in trait.values or () if v != trait.default_value][-1]
    if isinstance(trait, Bool):
        return not trait.default_value
    if isinstance(trait, Int):
        return int(trait.default_value or 0) + 7
    if isinstance(trait, Float):
        return float(trait.default_value or 0) + 2.5
    if isinstance(trait, Unicode):
        return "~/folder with 'quotes' and \"more\""  # what the kernel's command line would change
    if isinstance(trait, List):
        item = getattr(trait, "_trait", None)
        return [item.values[-1]] if isinstance(item, Enum) else ["a:/b:ro", "None", "'quoted'"]
    if isinstance(trait, Dict):
        value = getattr(trait, "_value_trait", None)
        return {"A.b": "ask"} if value is not None else {"/out": {"suffixes": [".csv"], "host_writes": "any"}}
    raise AssertionError(f"no test value for a {type(trait).__name__} setting: add one here")


def read_by_the_kernel(arguments: list[str]) -> dict[str, Any]:
    """The SandboxKernel section the kernel's own application makes of these command-line arguments."""
    app = SandboxKernelApp()
    with warnings.catch_warnings():  # traitlets' DeprecationWarning for container literals
        warnings.simplefilter("ignore", DeprecationWarning)
        app.parse_command_line(arguments)
    section = app.config.get("SandboxKernel", {})
    return {name: keywords.checked(name, SETTINGS[name], value) for name, value in section.items()}


def test_the_keywords_are_every_setting_of_the_kernel():
    assert len(SETTINGS) > 20 and set(SETTINGS) == {s.name for s in config_doc.kernel_settings()}
    assert not set(SETTINGS) & set(API_OPTIONS), "a setting and an option of the API share a name"


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_setting_is_a_keyword_that_reaches_the_kernel_unchanged(name):
    value = other_value(SETTINGS[name])
    sandbox = AsyncSandbox(**{name: value})  # checks, starts nothing
    assert sandbox.kernel is None and len(sandbox.arguments) == 1
    assert read_by_the_kernel(sandbox.arguments) == {name: value}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_a_bad_value_for_any_setting_is_refused_before_a_kernel_starts(name):
    with pytest.raises(SandboxSettingsError) as caught:
        Sandbox(**{name: object()})
    (problem,) = caught.value.problems
    assert problem.startswith(f"{name}=<object object") and "(allowed: " in problem, problem
    assert config_doc.type_text(SETTINGS[name]).replace("`", "") in problem


def test_bad_values_are_explained_all_at_once():
    with pytest.raises(SandboxSettingsError) as caught:
        AsyncSandbox(cell_timeout=-1, working_folder="yes", mounts=None, skill_policy={"A": 1})
    message, problems = str(caught.value), caught.value.problems
    assert message.startswith("AsyncSandbox() was given settings the kernel cannot use; nothing started:")
    assert problems[0] == (
        "cell_timeout=-1: SandboxKernel.cell_timeout must be a positive number of seconds, got -1.0 "
        "(allowed: float or None)"
    )
    assert "expected any of ['off', 'ro', 'rw']" in problems[1] and "allowed: one of 'off', 'ro', 'rw'" in problems[1]
    assert problems[2].startswith("mounts=None: ") and "allowed: list of str" in problems[2]
    assert problems[3].startswith("skill_policy={'A': 1}: ") and "allowed: dict with str values" in problems[3]


def test_a_value_the_command_line_cannot_carry_is_refused():
    with pytest.raises(SandboxSettingsError, match=r"skill_approver='a\\x00b': .*cannot be passed"):
        AsyncSandbox(skill_approver="a\0b")


def test_a_path_is_taken_for_a_str_setting(tmp_path):
    sandbox = AsyncSandbox(skills_path=tmp_path, pyodide_index=Path("~/index"))
    assert read_by_the_kernel(sandbox.arguments) == {"skills_path": str(tmp_path), "pyodide_index": "~/index"}


@pytest.mark.parametrize(
    ("given", "close"),
    [("pyodide_indx", "'pyodide_index'"), ("skill_polcy", "'skill_policy'"), ("aprover", "'approver'")],
)
def test_an_unknown_keyword_names_the_close_ones_and_where_the_list_is(given, close):
    with pytest.raises(TypeError) as caught:
        Sandbox(**{given: 1})
    message = str(caught.value)
    assert message.startswith(f"Sandbox() got an unexpected keyword argument {given!r}: did you mean {close}")
    assert "docs/agents.md, 'Settings as keywords'" in message


def test_an_unknown_keyword_without_close_names_still_says_where_the_list_is():
    with pytest.raises(TypeError, match=r"argument 'zzz': it takes every kernel setting as a keyword: see docs/"):
        AsyncSandbox(zzz=1)


def test_a_new_trait_is_a_keyword_by_itself(monkeypatch):
    class Extended(SandboxKernel):
        __module__ = "sandbox_kernel.jupyter.extended"  # as if declared in the kernel's own code
        brand_new = Int(5, help="A setting added later.").tag(config=True)

    monkeypatch.setattr(keywords, "kernel_class", lambda: Extended)
    sandbox = AsyncSandbox(brand_new=6)
    assert sandbox.arguments == ["--SandboxKernel.brand_new=6"]
    with pytest.raises(SandboxSettingsError, match=r"brand_new=.six.: .*expected an int"):
        AsyncSandbox(brand_new="six")


def test_the_typed_keywords_and_the_docs_table_are_made_from_the_traits():
    assert set(KernelSettings.__optional_keys__) == set(SETTINGS)
    assert keywords_doc.main(["--check"]) == 0, f"run `{keywords_doc.COMMAND}`"
    assert keywords_doc.MODULE.read_text() == keywords_doc.module_text()
    page = keywords_doc.PAGE.read_text()
    for name in SETTINGS:
        assert f"| `{name}` |" in page


def test_python_types_of_the_traits():
    assert keywords_doc.python_type(Float(None, allow_none=True)) == "float | None"
    assert keywords_doc.python_type(Unicode()) == "str | PathLike[str]"
    assert keywords_doc.python_type(Enum(["auto", True, False])) == 'Literal["auto", True, False]'
    assert keywords_doc.python_type(List(Enum(["a", "b"]))) == 'list[Literal["a", "b"]]'
    assert keywords_doc.python_type(Dict(value_trait=Unicode())) == "dict[str, str]"
    assert keywords_doc.python_type(Dict()) == "dict[str, Any]"


def test_fork_starts_with_the_same_keywords():
    sandbox = Sandbox(cell_timeout=5, skill_policy={"A": "ask"}, kernel_name="pyodide-sandbox")
    try:
        assert sandbox._async._settings == {
            "cell_timeout": 5,
            "skill_policy": {"A": "ask"},
            "kernel_name": "pyodide-sandbox",
        }
    finally:
        sandbox.close()


def test_a_type_checker_knows_the_keywords(tmp_path):
    """The package is typed (py.typed): mypy holds a program to the settings' types and names."""
    from mypy import api

    (tmp_path / "agent.py").write_text(
        "from pathlib import Path\n"
        "from sandbox_kernel import AsyncSandbox, Sandbox\n"
        "Sandbox(pyodide_index=Path('i'), packages=['six'], skill_policy={'A': 'ask'}, cell_timeout=None,\n"
        "        spare_sandbox=True, os_layers=['seccomp'], approver=lambda r: r.args == [b'x'])\n"
        "Sandbox(working_folder='maybe')\n"
        "Sandbox(pyodide_indx='x')\n"
        "AsyncSandbox(memory_limit_mb='lots')\n"
    )
    cache = Path(__file__).resolve().parents[1] / "artifacts" / "mypy-agent-api"  # warm after the first run
    out, _, status = api.run(["--strict", "--cache-dir", str(cache), str(tmp_path / "agent.py")])
    errors = [line.split(": error: ")[0].rsplit(":", 1)[1] + ": " + line.split(": error: ")[1]
              for line in out.splitlines() if ": error: " in line]  # fmt: skip
    assert status == 1 and len(errors) == 3, out
    assert errors[0].startswith('5: Argument "working_folder" to "Sandbox" has incompatible type'), out
    assert errors[1].startswith('6: Unexpected keyword argument "pyodide_indx" for "Sandbox"; did you mean'), out
    assert errors[2].startswith('7: Argument "memory_limit_mb" to "AsyncSandbox" has incompatible type'), out

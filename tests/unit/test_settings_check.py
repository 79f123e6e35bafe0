"""What is wrong with SandboxKernel settings, found before the kernel is made (no sockets, no sandbox)."""

from __future__ import annotations

from traitlets.config import Config

from sandbox_kernel.jupyter.kernel import SandboxKernel
from sandbox_kernel.jupyter.settings_check import describe_unknown, problems, unknown_settings, value_problem


def test_unknown_names_get_the_closest_setting():
    config = Config({"SandboxKernel": {"cell_timout": 1, "cell_timeout": 2}})
    assert unknown_settings(config, SandboxKernel) == ["cell_timout"]
    message = describe_unknown("cell_timout", SandboxKernel)
    assert message.startswith("SandboxKernel.cell_timout is not a setting of this kernel: did you mean "
                              "SandboxKernel.cell_timeout?")  # fmt: skip
    assert "debug_just_my_code" not in message  # ipykernel's own settings are not listed as ours


def test_values_go_through_the_kernels_own_validators():
    assert value_problem(SandboxKernel, "cell_timeout", 3.0) is None
    assert "must be a positive number of seconds, got -1" in value_problem(SandboxKernel, "cell_timeout", -1)
    assert "expected any of ['auto', 'required', 'off']" in value_problem(SandboxKernel, "os_sandbox", "maybe")
    assert "expected an int" in value_problem(SandboxKernel, "memory_limit_mb", "lots")


def test_problems_name_where_each_setting_was_made():
    config = Config({"SandboxKernel": {"cell_timeout": -1, "nope": 1, "trust_output": False}})
    messages, bad = problems(config, SandboxKernel, lambda name: f"set in <{name} origin>")
    assert bad == ["nope", "cell_timeout"]
    assert messages[0].endswith("(set in <nope origin>)") and messages[1].endswith("(set in <cell_timeout origin>)")

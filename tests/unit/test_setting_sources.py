"""Where a setting was given, as the program that started the kernel says (jupyter/setting_sources.py)."""

from __future__ import annotations

from sandbox_kernel.jupyter.kernel import SandboxKernel
from sandbox_kernel.jupyter.setting_sources import COMMAND_LINE, Sources, argument, of_command, parse
from sandbox_kernel.jupyter.settings_check import own_settings

OWN = own_settings(SandboxKernel)
RUN_FLAGS = {"mounts": "--mount", "working_folder": "--working-folder"}


def test_a_command_names_its_flags_and_where_each_setting_was_given():
    sources = of_command("sandbox-kernel run", ["--SandboxKernel.cell_timeout=-1"], RUN_FLAGS, ["mounts"])
    assert sources.origin("mounts") == "--mount of sandbox-kernel run"
    assert sources.origin("cell_timeout") == "--SandboxKernel.cell_timeout of sandbox-kernel run"
    assert sources.origin("allow_net") == COMMAND_LINE
    assert sources.reported
    assert (
        sources.respell(
            "SandboxKernel.mounts, mount_limits, working_folder or project_folder: x; see SandboxKernel.mounts", OWN
        )
        == "--mount, --SandboxKernel.mount_limits, --working-folder or --SandboxKernel.project_folder: x; see --mount"
    )


def test_respelling_leaves_what_is_not_a_setting_and_options_as_written():
    sources = of_command("sandbox-kernel run", [], RUN_FLAGS)
    assert sources.respell("SandboxKernel.bogus is not a setting: did you mean SandboxKernel.mounts?", OWN) == (
        "SandboxKernel.bogus is not a setting: did you mean --mount?"
    )
    given = "given as --SandboxKernel.mounts of sandbox-kernel run"
    assert sources.respell(given, OWN) == given
    assert Sources().respell("SandboxKernel.mounts or working_folder", OWN) == "SandboxKernel.mounts or working_folder"


def test_the_argument_reads_back_and_anything_else_is_no_sources():
    sources = Sources({"mounts": "the keyword mounts= of Sandbox()"}, reported=True)
    option, text = argument(sources).split("=", 1)
    assert option == "--SandboxKernelApp.setting_sources" and parse(text) == sources
    for bad in ("", "not json", "[1]", '{"given": 3, "names": "x", "other": "no placeholder", "reported": 1}'):
        assert parse(bad) == Sources()
    assert parse("x" * (65 << 10)) == Sources()  # a launcher's words, not data

"""Every way guest data leaves the sandbox, with the gate that applies the allowlist and the tests that prove it.

One row per exit: the channel (IOPub, a shell or control reply, stdin, a guest request the host serves, a file
operation on a host folder, a file the kernel writes, a port, a log), the message kind or operation, what of the
guest's it carries, the gate (`module:name` in this package, or `host_ts/file.ts:name`) and the tests
(`path::test_name`). tests/unit/test_exits.py fails when a kind the kernel can send, or the protocol files
declare, has no row here, when a gate does not resolve, and when a named test does not exist. docs/security.md's
"Every exit" table is made from this list:

    python -m sandbox_kernel.exits          # rewrite the table in docs/security.md
    python -m sandbox_kernel.exits --check  # exit 1 if it differs

To add an exit: a row here (its gate and tests first), then the command above.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "security.md"
COMMAND = "python -m sandbox_kernel.exits"
BEGIN = f"<!-- The table below is generated from kernel/sandbox_kernel/exits.py by `{COMMAND}`: edit it there. -->"
END = "<!-- End of the generated exits table. -->"

IOPUB, SHELL, CONTROL, STDIN, GUEST = "iopub", "shell reply", "control reply", "stdin", "guest request"
FILE_OP, FILE, PORT, LOG, BROWSER = "file operation", "file", "port", "log", "browser page"
CHANNELS = (IOPUB, SHELL, CONTROL, STDIN, GUEST, FILE_OP, FILE, PORT, LOG, BROWSER)


@dataclass(frozen=True)
class Exit:
    """One way out: `kind` on `channel`, carrying `carries`, through `gate`, proven by `tests`."""

    channel: str
    kind: str
    carries: str  # what of the guest's it carries ("nothing": the host makes it alone)
    gate: str  # "sandbox_kernel.module:name" or "host_ts/file.ts:name"
    tests: tuple[str, ...]  # "tests/path.py::test_name" or "host_ts/x_test.ts::<Deno.test's name>"

    @property
    def guest_data(self) -> bool:
        return not self.carries.startswith("nothing")


_DISPLAY_TESTS = (
    "tests/unit/test_sanitize.py::test_bundles_drop_executable_types_and_keep_safe_renderers",
    "tests/unit/test_dispatcher.py::test_display_is_cleaned_and_published",
    "tests/test_rich_output.py::test_no_url_to_another_host_leaves_the_kernel",
)
_COMM_TESTS = (
    "tests/unit/test_widget_guard.py::test_only_widget_targets_open",
    "tests/unit/test_widget_guard.py::test_html_values_are_cleaned_and_other_text_is_made_inert",
    "tests/test_widgets.py::test_widgets_of_other_modules_and_targets_do_not_reach_the_browser",
)
_WIDGET_PAGE = (
    "tests/test_jupyterlab_widgets.py::test_hostile_widget_messages_run_nothing_in_jupyterlab",
    "tests/test_jupyterlab_widgets.py::test_the_same_widget_messages_fire_under_ipykernel",
)
_BUDGET = "tests/unit/test_dispatcher.py::test_every_message_type_counts_against_the_budget"
_MOUNT_WRITES = (
    "tests/security/test_planted_files.py::test_the_writes_go_through_the_supervisor_not_the_worker",
    "tests/security/test_mounts.py::test_read_only_mount_refuses_js_writes_to_the_host_path",
)
_FILE_SERVICE = (
    "host_ts/file_service_test.ts::the file service serves every file call protocol.json declares, and no other name",
    "host_ts/file_service_test.ts::the file service refuses, before touching the host, every change that is not a "
    "plain data file",
    "tests/security/test_host_writes.py::test_a_forged_call_past_the_driver_is_refused_by_the_supervisor",
)
_DATA_ONLY = "tests/security/test_host_writes.py::test_only_data_files_reach_the_host_and_the_rest_works_inside"
_HOST_PROGRAMS = (
    _DATA_ONLY,
    "tests/security/test_host_writes.py::test_git_status_runs_nothing_the_guest_wrote",
    "tests/security/test_host_writes.py::test_pytest_runs_nothing_the_guest_wrote",
    "tests/security/test_host_writes.py::test_pdb_runs_no_pdbrc_the_guest_wrote",
    "tests/security/test_host_writes.py::test_the_users_module_wins_over_what_the_guest_wrote_beside_it",
)

EXITS: tuple[Exit, ...] = (
    # ---- IOPub ----------------------------------------------------------------------------------------------------
    Exit(IOPUB, "stream", "print() and the shell's output, cut at max_output_bytes; kernel notices escape guest "
         "strings (guest_text)", "sandbox_kernel.jupyter.output:OutputRouter",
         ("tests/security/test_shell_attacks.py::test_a_flood_of_output_is_cut_at_max_output_bytes",
          "tests/unit/test_dispatcher.py::test_guest_made_strings_in_notices_stay_on_one_line")),
    Exit(IOPUB, "display_data", "a mime bundle: allowlisted types, HTML/SVG/Markdown cleaned, URLs to other hosts "
         "dropped", "sandbox_kernel.jupyter.sanitize:OutputSanitizer", (*_DISPLAY_TESTS, _BUDGET)),
    Exit(IOPUB, "update_display_data", "as display_data, for a display id", "sandbox_kernel.jupyter.sanitize:"
         "OutputSanitizer", ("tests/test_rich_output.py::test_display_handle_update", *_DISPLAY_TESTS[:1])),
    Exit(IOPUB, "execute_result", "as display_data", "sandbox_kernel.jupyter.sanitize:OutputSanitizer",
         ("tests/test_rich_output.py::test_execute_result_carries_every_repr", *_DISPLAY_TESTS[:1])),
    Exit(IOPUB, "error", "ename, evalue, traceback: the schema's bounds, then max_output_bytes",
         "sandbox_kernel.protocol.schema:event", ("tests/unit/test_guest_schema.py::test_valid_events_pass", _BUDGET)),
    Exit(IOPUB, "clear_output", "a boolean", "sandbox_kernel.protocol.schema:event",
         ("tests/test_rich_output.py::test_clear_output_wait_flag",)),
    Exit(IOPUB, "comm_open", "a widget's model: jupyter.widget only, its model and view (module, name, version) "
         "from widget_models' table and fixed for its life, HTML traits cleaned, media URLs judged, links only "
         "between traits that hold no drawn text", "sandbox_kernel.jupyter.widget_guard:WidgetGuard.from_guest",
         (*_COMM_TESTS, "tests/unit/test_widget_guard.py::test_a_model_is_drawn_only_by_its_own_view",
          "tests/unit/test_widget_guard.py::test_links_join_only_traits_that_hold_no_drawn_text", *_WIDGET_PAGE)),
    Exit(IOPUB, "comm_msg", "a widget's update, echo or state reply (ipywidgets' nested format): judged against "
         "the model fixed at open; no renames, each buffer path once and only into byte traits",
         "sandbox_kernel.jupyter.widget_guard:WidgetGuard.from_guest",
         ("tests/unit/test_widget_guard.py::test_messages_on_comms_never_opened_or_of_unknown_methods_are_refused",
          "tests/unit/test_widget_guard.py::test_an_update_may_not_rename_the_model_or_its_view",
          "tests/unit/test_widget_guard.py::test_the_state_reply_is_cleaned_widget_by_widget_at_the_nested_level",
          "tests/unit/test_widget_guard.py::test_duplicate_buffer_paths_are_refused",
          "tests/unit/test_widget_guard.py::test_media_urls_are_judged_for_every_media_model_and_json_values",
          "tests/unit/test_widget_guard.py::test_a_media_url_is_judged_as_the_browser_reads_it",
          "tests/unit/test_widget_guard.py::test_a_widget_may_not_contain_itself",
          "tests/unit/test_widget_guard.py::test_output_widget_outputs_are_rebuilt_from_their_fields",
          *_COMM_TESTS[1:], *_WIDGET_PAGE,
          "tests/test_jupyterlab_widgets.py::test_live_widgets_survive_a_page_reload_cleaned",
          "tests/test_jupyterlab_widgets.py::test_a_hostile_state_reply_runs_nothing",
          "tests/test_jupyterlab_widgets.py::test_the_same_state_reply_fires_under_ipykernel")),
    Exit(IOPUB, "comm_close", "a comm id", "sandbox_kernel.jupyter.widget_guard:WidgetGuard.from_guest",
         ("tests/unit/test_widget_guard.py::test_messages_on_comms_never_opened_or_of_unknown_methods_are_refused",)),
    Exit(IOPUB, "status", "nothing", "ipykernel", ()),
    Exit(IOPUB, "execute_input", "nothing", "ipykernel", ()),
    # ---- shell replies ----------------------------------------------------------------------------------------------
    Exit(SHELL, "execute_reply", "status, error fields, user_expressions (cleaned bundles) and payload (pager "
         "pages cleaned, set_next_input; nothing else), within max_output_bytes",
         "sandbox_kernel.jupyter.cell_runner:CellRunner._clean_reply",
         ("tests/test_reply_bounds.py::test_execute_reply_payloads_and_expressions_are_rebuilt", _BUDGET,
          "tests/security/test_hostile_guest.py::test_every_message_and_the_reply_count_against_max_output_bytes")),
    Exit(SHELL, "execute_reply metadata", "nothing: the kernel's own measurements (timed_out, restarted, metrics)",
         "sandbox_kernel.jupyter.kernel:SandboxKernel.finish_metadata", ()),
    Exit(SHELL, "complete_reply", "matches: strings, at most MAX_MATCHES and max_output_bytes, types index-aligned, "
         "cursor positions within the code", "sandbox_kernel.jupyter.replies:bound_complete",
         ("tests/unit/test_reply_rules.py::test_a_million_matches_are_cut_to_the_cap_and_the_cut_is_said",
          "tests/unit/test_reply_rules.py::test_cursor_positions_outside_the_code_give_no_matches",
          "tests/test_reply_bounds.py::test_a_hostile_flood_of_completions_is_capped_with_a_note",
          "tests/test_reply_bounds.py::test_a_namespace_of_many_names_completes_within_the_cap")),
    Exit(SHELL, "inspect_reply", "text/plain cut at max_output_bytes with a marker, text/html cleaned (or dropped "
         "when it does not fit); no other type, no metadata of the guest's", "sandbox_kernel.jupyter.replies:"
         "bound_inspect",
         ("tests/unit/test_reply_rules.py::test_only_text_plain_and_cleaned_html_reach_the_inspector",
          "tests/test_reply_bounds.py::test_a_30_mb_docstring_is_cut_with_the_marker_and_the_kernel_answers_after",
          "tests/test_reply_bounds.py::test_a_hostile_inspect_reply_is_cut_and_cleaned",
          "tests/test_jupyterlab.py::test_a_hostile_inspect_reply_shows_cleaned_html_in_the_tooltip_and_runs_no_"
          "script")),
    Exit(SHELL, "is_complete_reply", "a status from four, an indent of blanks only",
         "sandbox_kernel.jupyter.replies:bound_is_complete",
         ("tests/unit/test_reply_rules.py::test_is_complete_indents_are_blanks_only",)),
    Exit(SHELL, "history_reply", "the frontend's own code, and each cell's result text (the first "
         "RESULT_TEXT_CHARS of a text/plain that already passed the output budget)",
         "sandbox_kernel.jupyter.history:History.query", ("tests/test_introspection.py::test_history",)),
    Exit(SHELL, "comm_info_reply", "the ids and targets of the comms the widget guard let open",
         "sandbox_kernel.jupyter.widget_guard:WidgetGuard.comm_info",
         ("tests/test_widgets.py::test_comm_info_lists_the_open_widgets_of_a_target",)),
    Exit(SHELL, "kernel_info_reply", "nothing: the host's constants (the guest's Python version is the "
         "pinned Pyodide's)", "sandbox_kernel.jupyter.kernel:SandboxKernel.kernel_info",
         ("tests/test_execute.py::test_kernel_info_reports_the_guest_python",)),
    Exit(SHELL, "connect_reply", "nothing", "ipykernel", ()),
    Exit(SHELL, "shutdown_reply", "nothing", "sandbox_kernel.jupyter.kernel:SandboxKernel.do_shutdown", ()),
    Exit(SHELL, "interrupt_reply", "nothing", "ipykernel", ()),
    # ---- control replies --------------------------------------------------------------------------------------------
    Exit(CONTROL, "debug_reply", "nothing (the kernel has no debugger)", "ipykernel", ()),
    Exit(CONTROL, "usage_reply", "nothing: the host's own CPU and memory figures", "ipykernel", ()),
    Exit(CONTROL, "create_subshell_reply", "nothing: refused", "ipykernel",
         ("tests/test_widgets.py::test_the_kernel_offers_no_subshells",)),
    Exit(CONTROL, "delete_subshell_reply", "nothing: refused", "ipykernel", ()),
    Exit(CONTROL, "list_subshell_reply", "nothing: refused", "ipykernel", ()),
    # ---- stdin ------------------------------------------------------------------------------------------------------
    Exit(STDIN, "input_request", "input()'s prompt (at most 4096 characters); a prompt that imitates the "
         "kernel's approval prompt never reaches the person", "sandbox_kernel.jupyter.stdin_gate:StdinGate",
         ("tests/security/test_kernel_voice.py::test_a_guest_prompt_that_looks_like_the_kernels_never_reaches_the_"
          "person", "tests/security/test_hostile_guest.py::test_concurrent_prompts_cannot_take_each_others_answers",
          "tests/unit/test_stdin_gate.py::test_stale_replies_sent_before_a_prompt_are_dropped")),
    # ---- guest requests served by the host --------------------------------------------------------------------------
    Exit(GUEST, "skill_call", "a skill's name, method and JSON arguments: configured skills and public methods "
         "only, their policy (allow, ask, deny), bounded sizes; the audit log keeps a digest",
         "sandbox_kernel.jupyter.guest_services:GuestServiceDesk.skill_call",
         ("tests/test_skills.py::test_gatekeeper_refuses_crafted_requests",
          "tests/test_skills.py::test_oversize_arguments_and_results",
          "tests/security/test_host_files.py::test_raw_skill_calls_reach_only_public_skill_methods")),
    Exit(GUEST, "load_packages", "package names, looked up in the pinned index only",
         "sandbox_kernel.jupyter.guest_services:GuestServiceDesk.load_packages",
         ("tests/test_packages.py::test_a_package_the_index_cannot_provide_fails_only_where_it_is_imported",)),
    Exit(GUEST, "pip_installed", "requirement strings, replayed after a restart (MAX_PIP_REPLAYS)",
         "sandbox_kernel.jupyter.guest_services:GuestServiceDesk.pip_installed",
         ("tests/test_packages.py::test_pip_install_from_the_wheelhouse_without_network_and_again_after_a_restart",)),
    Exit(GUEST, "pip_uninstalled", "package names, forgotten from the replays",
         "sandbox_kernel.jupyter.guest_services:GuestServiceDesk.pip_uninstalled",
         ("tests/test_packages.py::test_pip_list_show_and_uninstall_answer_as_pip_does",)),
    Exit(GUEST, "wheelhouse_wheels", "requirement strings, matched against the operator's wheelhouse",
         "sandbox_kernel.jupyter.guest_services:GuestServiceDesk.wheelhouse_wheels",
         ("tests/test_packages.py::test_pip_install_from_the_wheelhouse_without_network_and_again_after_a_restart",)),
    Exit(GUEST, "interrupt_taken", "a flag", "sandbox_kernel.protocol.dispatcher:RequestDispatcher.on_event",
         ("tests/unit/test_dispatcher.py::test_the_guest_says_when_the_cell_took_its_interrupt",
          "tests/security/test_hostile_guest.py::test_a_guest_that_says_it_took_the_interrupt_but_runs_on_is_still_"
          "restarted")),
    # ---- file operations on host folders (host_ts/protocol.json fileOps) --------------------------------------------
    *(
        Exit(FILE_OP, op, carries, "host_ts/write_policy.ts:hostWritable", (*_FILE_SERVICE, *tests))
        for op, carries, tests in (
            ("open", "a path inside a mount: plain data files of host_ts/host_writes.json only, the rest stays in "
             "the sandbox's layer; .json/.txt only where the mount's suffixes name them",
             (_DATA_ONLY, "tests/security/test_mounts.py::test_dotdot_from_a_host_path_is_refused",
              "tests/security/test_host_writes.py::test_json_and_txt_reach_the_host_only_from_a_mount_whose_suffixes_name_them",
              "tests/security/test_host_writes.py::test_cmake_runs_no_include_the_guest_planted_through_its_cache")),
            ("read", "nothing: bytes go into the sandbox", ()),
            ("write", "bytes into an open data file, within max_growth_bytes (apparent size: sparse files count)",
             ("tests/security/test_host_writes.py::test_a_sparse_terabyte_is_refused_by_the_growth_quota",
              "tests/security/test_host_writes.py::test_unlinking_a_file_still_open_gives_its_bytes_back_only_when_it_is_closed",
              *_MOUNT_WRITES)),
            ("fstat", "nothing", ()),
            ("close", "nothing", ()),
            ("mknod", "a new data file or plain folder, its mode made safe (no setuid, group or world write, execute)",
             ("host_ts/write_policy_test.ts::modes lose setuid, group and world write and (files) execute", *_HOST_PROGRAMS)),
            ("setattr", "a mode (made safe), times, a size within max_growth_bytes",
             ("tests/security/test_mounts.py::test_setuid_bits_set_by_the_guest_do_not_stay_on_the_host",
              "tests/security/test_host_writes.py::test_a_sparse_terabyte_is_refused_by_the_growth_quota",
              "tests/security/test_host_writes.py::test_truncating_through_a_handle_counts_its_own_file_not_the_name_it_was_opened_by",
              "tests/security/test_host_writes.py::test_host_folders_keep_their_owners_access_and_file_modes_lose_write_for_others_and_exec")),
            ("unlink", "a data file's path (the user's other files are hidden by a whiteout, kept on the host)",
             ("tests/security/test_host_writes.py::test_the_users_own_code_is_copied_up_and_deleting_it_keeps_the_"
              "host_copy", *_MOUNT_WRITES)),
            ("rmdir", "a plain folder's path", _MOUNT_WRITES),
            ("rename", "two data-file paths inside one mount (both names allowed)",
             ("tests/security/test_host_writes.py::test_an_atomic_write_then_rename_lands_the_data_file_on_the_host",
              "tests/security/test_host_writes.py::test_a_refused_rename_over_a_host_file_leaves_it_and_the_source_as_they_were",
              "tests/security/test_host_writes.py::test_a_forged_rename_onto_itself_gives_nothing_back",
              *_HOST_PROGRAMS)),
            ("symlink", "nothing: always refused",
             ("tests/security/test_mounts.py::test_guest_cannot_create_links_in_a_writable_mount",)),
        )
    ),
    # ---- files the kernel writes ------------------------------------------------------------------------------------
    Exit(FILE, "checkpoint file", "the session's state, sealed with the checkpoint key (HMAC), 0600, at most "
         "max_checkpoint_bytes", "sandbox_kernel.checkpoints.file:write",
         ("tests/unit/test_checkpoint_file.py::test_any_changed_byte_is_refused",
          "tests/test_checkpoints.py::test_a_guest_that_floods_a_checkpoint_is_cut_at_the_limit",
          "tests/security/test_private_files.py::test_checkpoints_the_agent_api_hands_out_and_saves_are_private")),
    # ---- ports ------------------------------------------------------------------------------------------------------
    Exit(PORT, "launch-eg's kernel ports", "every message of the five channels (signed, not encrypted): they "
         "listen on loopback, the pod's own IP, or an SSH host's own address towards EG; any other address is "
         "logged as an exposure",
         "sandbox_kernel.enterprise_gateway.arguments:exposure",
         ("tests/test_enterprise_gateway.py::test_with_default_arguments_nothing_listens_beyond_loopback",
          "tests/unit/test_eg_launcher.py::test_remote_hosts_listen_on_their_route_to_eg_by_default",
          "tests/unit/test_eg_launcher.py::test_the_pod_listens_on_its_own_ip_which_kubernetes_gives_it",
          "tests/unit/test_eg_launcher.py::test_only_egs_pods_may_reach_the_kernel_pods")),
    Exit(PORT, "MCP over HTTP", "run results for the agent: only with the bearer token",
         "sandbox_kernel.client.mcp_http:BearerGate",
         ("tests/unit/test_mcp_credential.py::test_the_gate_refuses_requests_without_exactly_the_token",
          "tests/test_mcp.py::test_http_refuses_every_request_without_the_token")),
    # ---- logs -------------------------------------------------------------------------------------------------------
    Exit(LOG, "kernel log", "why a guest message was refused, never its data; guest strings escaped and cut "
         "(guest_text), Deno's stdout and stderr (which the guest can write) at debug, 4096 characters a line, "
         "escaped", "sandbox_kernel.protocol.schema:InvalidGuestMessage",
         ("tests/unit/test_guest_schema.py::test_invalid_events_are_refused_without_quoting_them",
          "tests/unit/test_startup.py::test_deno_output_reaches_the_kernel_log_escaped",
          "tests/security/test_kernel_voice.py::test_a_guest_crash_reason_with_newlines_stays_on_the_kernels_line")),
    Exit(LOG, "audit log", "a skill call's skill, method, decision and a digest of its arguments (JSON lines, "
         "0600, rotated)", "sandbox_kernel.skills.audit:AuditLog.record",
         ("tests/test_skills.py::test_audit_log_records_every_call",
          "tests/test_skills.py::test_every_refused_call_is_in_the_audit_log_even_in_a_flood",
          "tests/unit/test_private_file_modes.py::test_the_audit_log_and_the_folders_it_makes_are_private")),
    # ---- the page: the second wall behind every row above that the browser draws --------------------------------
    Exit(BROWSER, "JupyterLab's page", "whatever the kernel's cleaning missed: with `sandbox-kernel install "
         "--page-policy`, a Content-Security-Policy lets no inline script, eval'd renderer output or foreign "
         "fetch run (proven with the kernel's cleaning switched off)", "sandbox_kernel.jupyter.page_policy:policy",
         ("tests/test_page_policy.py::test_with_the_cleaning_off_the_policy_alone_stops_every_payload",
          "tests/test_page_policy.py::test_without_the_policy_the_same_uncleaned_payloads_run_and_fetch",
          "tests/test_page_policy.py::test_jupyterlab_works_under_the_policy")),
)  # fmt: skip


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(exits: tuple[Exit, ...] = EXITS) -> str:
    """The markdown table of `exits`, grouped by channel."""
    rows = ["| Channel | Kind | What of the guest's it carries | Gate | Tests |", "| --- | --- | --- | --- | --- |"]
    for exit_ in sorted(exits, key=lambda e: CHANNELS.index(e.channel)):
        tests = "<br>".join(f"`{_cell(t)}`" for t in exit_.tests) or "-"
        rows.append(
            f"| {exit_.channel} | `{_cell(exit_.kind)}` | {_cell(exit_.carries)} | `{_cell(exit_.gate)}` | {tests} |"
        )
    return "\n".join(rows) + "\n"


def render(page: str, exits: tuple[Exit, ...] = EXITS) -> str:
    """`page` with the part between BEGIN and END made from `exits`."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"{PAGE.name} has no generated exits table (the lines {BEGIN!r} ... {END!r})")
    return f"{head}{BEGIN}\n{table(exits)}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Write docs/security.md's table of exits.")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the page differs")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    current = args.page.read_text(encoding="utf-8")
    made = render(current)
    if made == current:
        return 0
    if args.check:
        print(f"{args.page} differs from kernel/sandbox_kernel/exits.py: run `{COMMAND}`", file=sys.stderr)
        return 1
    args.page.write_text(made, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The kernel's protocol behaviour with a fake sandbox: execute, errors, interrupts, timeouts, restarts, stdin,
settings errors and the reply's metadata, each in milliseconds (the same promises tests/ checks with real Deno)."""

from __future__ import annotations

import time

from inprocess.harness import InProcessKernel, run


def test_a_cell_streams_its_output_and_result_and_counts():
    async def go():
        async with InProcessKernel() as k:
            cell = await k.execute("print:hello;result:42")
            assert cell.reply["status"] == "ok" and cell.reply["execution_count"] == 1
            assert cell.stream() == "hello\n"
            assert cell.of_type("execute_result")[0]["data"] == {"text/plain": "42"}
            assert cell.metadata["timed_out"] is False and cell.metadata["restarted"] is False
            assert set(cell.metadata["metrics"]) == {
                "wall_s",
                "cpu_s",
                "peak_memory_bytes",
                "output_bytes",
                "skill_calls",
            }
            second = await k.execute("print:again")
            assert second.reply["execution_count"] == 2
            silent = await k.execute("print:quiet", silent=True)
            assert silent.reply["execution_count"] == 2 and k.kernel.execution_count == 3

    run(go())


def test_state_persists_and_errors_are_replies():
    async def go():
        async with InProcessKernel() as k:
            await k.execute("set:x=1")
            assert (await k.execute("get:x")).of_type("execute_result")[0]["data"]["text/plain"] == "'1'"
            cell = await k.execute("error:ValueError")
            assert cell.reply["status"] == "error" and cell.reply["ename"] == "ValueError"
            assert len(k.sandboxes) == 1

    run(go())


def test_an_interrupt_ends_the_cell_and_keeps_state():
    async def go():
        async with InProcessKernel() as k:
            await k.execute("set:x=kept")
            cell = await k.execute_and_interrupt("sleep:20")
            assert cell.reply["ename"] == "KeyboardInterrupt", cell.reply
            assert k.sandboxes[0].interrupts == 1 and len(k.sandboxes) == 1
            assert (await k.execute("get:x")).reply["status"] == "ok"

    run(go())


def test_a_cell_that_ignores_interrupts_gets_a_fresh_sandbox():
    async def go():
        async with InProcessKernel(interrupt_grace=0.05) as k:
            await k.execute("set:x=1")
            cell = await k.execute_and_interrupt("hang")
            assert cell.reply["ename"] == "SandboxRestarted" and cell.metadata["restarted"] is True, cell.reply
            assert "did not stop within 0.05s of the interrupt" in cell.reply["evalue"]
            lost = await k.execute("get:x")
            assert lost.reply["ename"] == "NameError" and len(k.sandboxes) >= 2

    run(go())


def test_cell_timeout_interrupts_then_restarts():
    async def go():
        async with InProcessKernel(cell_timeout=0.05, interrupt_grace=0.05, spare_sandbox=False) as k:
            await k.execute("set:x=1")
            stopped = await k.execute("sleep:20")
            assert stopped.reply["ename"] == "SandboxTimeout" and stopped.metadata["timed_out"] is True
            assert "variables were kept" in stopped.reply["evalue"]
            assert (await k.execute("get:x")).reply["status"] == "ok"
            killed = await k.execute("hang")
            assert killed.reply["ename"] == "SandboxTimeout" and killed.metadata["restarted"] is True
            assert "all variables were lost" in killed.reply["evalue"]
            assert (await k.execute("get:x")).reply["ename"] == "NameError"

    run(go())


def test_a_crash_is_told_and_the_next_cell_runs_in_a_fresh_sandbox():
    async def go():
        async with InProcessKernel() as k:
            await k.execute("set:x=1")
            crashed = await k.execute("crash")
            assert crashed.reply["ename"] == "SandboxRestarted", crashed.reply
            assert "the sandbox crashed" in crashed.reply["evalue"]
            after = await k.execute("get:x")
            assert after.reply["ename"] == "NameError"

    run(go())


def test_input_reaches_the_person_only_when_the_frontend_allows_it():
    async def go():
        async with InProcessKernel() as k:
            k.stdin.answers.append("Ada")
            cell = await k.execute("input:Name? ", allow_stdin=True)
            assert k.stdin.prompts == ["Name? "] and cell.stream() == "Ada\n"
            refused = await k.execute("input:Again? ", allow_stdin=False)
            assert k.stdin.prompts == ["Name? "]  # not asked
            assert "StdinNotImplementedError" in refused.stream()

    run(go())


def test_wrong_settings_answer_every_cell_and_start_no_sandbox():
    async def go():
        async with InProcessKernel(mounts=["/no/such/folder:/data"]) as k:
            cell = await k.execute("print:x")
            assert cell.reply["ename"] == "SandboxSettingsError" and "does not exist" in cell.reply["evalue"]
            assert k.sandboxes == []

    run(go())


def test_a_completion_while_the_sandbox_starts_is_answered_by_the_host_in_time():
    """JupyterLab drops completions slower than 1 s; a sandbox may take longer to start on a loaded machine. While it
    starts, the kernel names what a fresh namespace holds (keywords, builtins) itself; once it is up, the sandbox
    answers (the fake sandbox's answer is empty)."""

    async def go() -> tuple[dict, float, dict]:
        async with InProcessKernel(hold_starts=True) as k:
            started = time.monotonic()
            early = await k.kernel.do_complete("x = impo", None)
            took = time.monotonic() - started
            k.starts_allowed.set()
            await k.execute("print:up")
            later = await k.kernel.do_complete("x = impo", None)
            return early, took, later

    early, took, later = run(go())
    assert early["matches"] == ["import"] and (early["cursor_start"], early["cursor_end"]) == (4, 8), early
    assert early["metadata"]["_jupyter_types_experimental"][0]["type"] == "keyword"
    assert took < 1.0, f"the early answer took {took:.2f} s"
    assert later["matches"] == [], "a sandbox that is up must answer completions itself"

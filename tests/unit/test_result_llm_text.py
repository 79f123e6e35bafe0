"""ExecutionResult.to_llm (client/results.py): the kernel's error notice is said once, the cell's own output kept."""

from __future__ import annotations

from sandbox_kernel.client.results import ErrorInfo, ExecutionResult

NOTICE = "TimeoutError: the cell ran past SandboxKernel.timeout_s=5\n"


def _result(stderr: str) -> ExecutionResult:
    error = ErrorInfo("TimeoutError", "the cell ran past SandboxKernel.timeout_s=5", "Traceback ...\nTimeoutError")
    return ExecutionResult(stderr=stderr, error=error)


def test_the_kernels_notice_goes_but_the_cells_own_same_line_stays():
    text = _result(f"a\n{NOTICE}b\n{NOTICE}").to_llm()
    stderr = text.split("[stderr]\n", 1)[1].split("\n[error]", 1)[0]
    assert stderr == f"a\n{NOTICE}b"  # the cell printed the line itself once: kept; the kernel's notice: gone


def test_a_notice_alone_leaves_no_stderr_section():
    assert "[stderr]" not in _result(NOTICE).to_llm()
    assert _result("").to_llm().startswith("[error] TimeoutError: the cell ran past")

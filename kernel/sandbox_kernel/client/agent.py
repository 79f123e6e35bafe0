"""A small API for programs (LLM agents) that run code in the sandbox, on top of jupyter_client.

with Sandbox(cell_timeout=30) as sb:
    r = sb.run("print(1)")
    print(r.stdout, r.to_llm())
"""

from __future__ import annotations

import asyncio
import base64
import errno
import inspect
import itertools
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from queue import Empty
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox_kernel.checkpoints.cells import name_problem
from sandbox_kernel.checkpoints.client import Checkpoint, CheckpointError
from sandbox_kernel.client import remote_checkpoints
from sandbox_kernel.client.approvals import (
    Approver,
    MalformedApproval,
    Refused,
    allow_hint,
    approval_answer,
    approval_of,
)
from sandbox_kernel.client.connection import KernelConnection, KernelDied, execute_content
from sandbox_kernel.client.gateway_kernel import GatewayKernel
from sandbox_kernel.client.gateway_rest import TOKEN_ENV, GatewayError, checked_env, checked_url
from sandbox_kernel.client.kernel_settings import KernelSettings
from sandbox_kernel.client.keywords import (
    SandboxSettingsError,
    command_line,
    setting_traits,
    sources_argument,
    unknown_keyword,
)
from sandbox_kernel.client.local_kernel import KernelNotInstalled, LocalKernel
from sandbox_kernel.client.results import ExecutionResult, ResultBuilder
from sandbox_kernel.client.transfer import CHUNK, chunk_bytes, reported_size
from sandbox_kernel.jupyter import setting_sources
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")
__all__ = [
    "AsyncSandbox",
    "GatewayError",
    "KernelDied",
    "KernelNotInstalled",
    "SandboxOptions",
    "SandboxSettingsError",
]


class SandboxOptions(KernelSettings, total=False):
    """The keywords of Sandbox(...) and AsyncSandbox(...): every kernel setting (KernelSettings), and these."""

    approver: Approver | None  # decides skill calls whose policy is 'ask' (without one: refused)
    # answers the guest's input() prompts (None: end of input): a function (run in a thread) or a coroutine function
    input: Callable[[str], str | None] | Callable[[str], Awaitable[str | None]] | None
    on_stdout: Callable[[str], None] | None  # the default streaming callbacks of run()
    on_stderr: Callable[[str], None] | None
    on_output: Callable[[dict[str, Any]], None] | None
    extra_arguments: list[str] | None  # more of the kernel's command line, as they are (e.g. '--log-level=INFO')
    kernel_name: str
    cwd: str | Path | None  # the kernel's working folder (relative mounts, working_folder)
    startup_timeout: float  # seconds the kernel may take to answer its first request
    kernel_stderr: int | None  # where the kernel process's own stderr goes (e.g. subprocess.DEVNULL); None: ours
    # A kernel on a Jupyter Kernel Gateway or Enterprise Gateway at this URL instead of a local one; its token
    # (default: $SANDBOX_KERNEL_GATEWAY_TOKEN). Its kernels take their settings from the gateway machine.
    gateway_url: str | None
    gateway_token: str | None
    # The "env" of the gateway's start request (e.g. Enterprise Gateway's {"KERNEL_USERNAME": "alice"})
    gateway_env: dict[str, str] | None


API_OPTIONS = sorted(SandboxOptions.__optional_keys__ - KernelSettings.__optional_keys__)
LOCAL_ONLY = ("extra_arguments", "cwd", "kernel_stderr")  # options of a local kernel process (besides the settings)


def refuse_local_options(caller: str, given: dict[str, Any], settings: dict[str, Any]) -> None:
    """SandboxSettingsError naming each kernel setting (and option of a local kernel process) given together with
    gateway_url: they cannot reach a remote kernel's command line, and the gateway's operator sets its limits."""
    local = [name for name in LOCAL_ONLY if given.get(name) is not None]
    problems = [
        f"{name}: a kernel setting cannot be given to a kernel behind a gateway; its settings are the gateway "
        "machine's (its sandbox_kernel_config.py, which the gateway's operator controls: docs/gateway.md), and "
        "facts()['settings'] shows them"
        for name in settings
    ] + [f"{name}: an option of a local kernel process; a gateway starts its kernels itself" for name in local]
    if problems:
        listed = "\n".join(f"- {problem}" for problem in problems)
        raise SandboxSettingsError(f"{caller}(gateway_url=...) was given what only a local kernel takes; nothing "
                                   f"started:\n{listed}", problems)  # fmt: skip


class AsyncSandbox:
    """One sandboxed kernel, driven with asyncio.

    Every kernel setting is a keyword (`cell_timeout=30, mounts=[...], pyodide_index=..., skill_policy={...}`;
    the list: docs/agents.md, 'Settings as keywords'), checked by its trait here, before any kernel starts (a bad
    value raises SandboxSettingsError, an unknown keyword TypeError); a setting left out keeps what the kernel's
    configuration files say. The API's own keywords are those of SandboxOptions.
    """

    def __init__(self, **options: Unpack[SandboxOptions]) -> None:
        self._setup(type(self).__name__, options)

    @classmethod
    def _for(cls, caller: str, options: SandboxOptions) -> AsyncSandbox:
        """An AsyncSandbox whose errors about its keywords name `caller` (Sandbox, which drives one)."""
        sandbox = cls.__new__(cls)
        sandbox._setup(caller, options)
        return sandbox

    def _setup(self, caller: str, options: SandboxOptions) -> None:
        unknown = [name for name in options if name not in API_OPTIONS and name not in setting_traits()]
        if unknown:
            raise unknown_keyword(caller, unknown[0], API_OPTIONS)
        given: dict[str, Any] = dict(options)
        settings = {name: value for name, value in given.items() if name not in API_OPTIONS}
        self.gateway_url = options.get("gateway_url")
        if self.gateway_url:
            checked_url(self.gateway_url)
            refuse_local_options(caller, given, settings)
        else:
            for name in ("gateway_token", "gateway_env"):
                if options.get(name) is not None:
                    raise TypeError(f"{caller}() got {name} without gateway_url: it is for a gateway's kernels")
        gateway_env = options.get("gateway_env")
        self.gateway_env = None if gateway_env is None else checked_env(gateway_env)
        self._settings: SandboxOptions = options.copy()  # what fork() and from_checkpoint() start another sandbox with
        self._checkpoint_numbers = itertools.count(1)
        extra = list(options.get("extra_arguments") or [])
        self.arguments = command_line(caller, settings) + extra
        told = any(word.startswith(setting_sources.OPTION) for word in extra)  # a launcher's own words (the CLI)
        # The kernel's messages then name the keywords, and it leaves their report to start() (said once)
        self._sources = [] if told else [sources_argument(caller, settings)]
        self.approver = options.get("approver")
        self.input = options.get("input")  # answers the guest's input()/sys.stdin prompts (None: EOF); else EOF
        self.callbacks = (options.get("on_stdout"), options.get("on_stderr"), options.get("on_output"))
        self.kernel_name = options.get("kernel_name", KERNEL_NAME)
        cwd = options.get("cwd")
        self.cwd = str(cwd) if cwd else None
        self.startup_timeout = options.get("startup_timeout", 180.0)
        self.kernel: KernelConnection | None = None
        self._generation = 0  # of the kernel process: restart() starts the next one
        self._restarting: asyncio.Future[None] | None = None  # a restart under way: requests wait for it

    def _connection(self) -> KernelConnection:
        """The kernel this sandbox drives: on the gateway, or a private local process."""
        if self.gateway_url:
            token = self._settings.get("gateway_token")
            token = token or os.environ.get(TOKEN_ENV)
            return GatewayKernel(self.gateway_url, token, self.kernel_name, self.gateway_env)
        arguments = [*self.arguments, *self._sources]
        return LocalKernel(self.kernel_name, arguments, self.cwd, self._settings.get("kernel_stderr"))

    async def start(self) -> AsyncSandbox:
        """Start the kernel (once: a started sandbox, e.g. from fork(), may then be used with `async with`)."""
        if self.kernel is not None:
            return self
        self.kernel = self._connection()
        try:
            await self.kernel.start(self.startup_timeout)
            facts = await self.facts()
            if facts.get("settings_error"):
                raise SandboxSettingsError(facts["settings_error"], list(facts.get("settings_problems", [])))
        except BaseException:
            await self.close()  # what started is shut down (a kernel on a gateway too); start() may be tried again
            raise
        return self

    async def __aenter__(self) -> AsyncSandbox:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        kernel, self.kernel = self.kernel, None
        if kernel is not None:
            await kernel.close()

    async def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        on_stdout: Callable[[str], None] | None = None,
        on_stderr: Callable[[str], None] | None = None,
        on_output: Callable[[dict[str, Any]], None] | None = None,
        on_notice: Callable[[str, str], None] | None = None,
    ) -> ExecutionResult:
        """Run `code`; returns when the kernel is idle again. `timeout` bounds the wait (client side).
        `on_notice(kind, text)` gets the kernel's own notices (e.g. kind "timeout"), which otherwise reach
        on_stderr (on_stdout for "approval_view") like the code's output; they are in the result's streams either
        way."""
        assert self.kernel is not None, "call start() first (or use the sandbox as a context manager)"
        default_out, default_err, default_output = self.callbacks
        builder = ResultBuilder(
            on_stdout or default_out, on_stderr or default_err, on_output or default_output, on_notice
        )
        generation = await self._settled()
        started = time.monotonic()
        # stdin always allowed: prompts are answered by the approver / input=, else refused / end of input (EOFError)
        msg_id = self.kernel.send("shell", "execute_request", execute_content(code, stop_on_error=False))
        deadline = None if timeout is None else started + timeout
        answering: asyncio.Future[None] | None = None  # prompts being answered, beside the watch of iopub
        try:
            while True:
                wait = 0.05  # prompts to answer: look at stdin whenever iopub is quiet
                if deadline is not None:
                    wait = max(0.01, min(wait, deadline - time.monotonic()))
                try:
                    msg = await self.kernel.receive("iopub", wait)
                except Empty:
                    if deadline is not None and time.monotonic() > deadline:
                        await self.interrupt()
                        deadline = None
                    if answering is not None and answering.done():
                        finished: asyncio.Future[None] = answering
                        answering = None
                        finished.result()  # an approver's or input's own error is the caller's
                    if answering is None:  # only once the output sent before the prompt was handled
                        answering = asyncio.ensure_future(self._answer_stdin())
                    await self._check_alive(generation)
                    continue
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                    break
                builder.feed(msg)
        finally:
            if answering is not None:  # a prompt the kernel withdrew (an interrupt, a timeout) is not waited on
                answering.cancel()
                answering.add_done_callback(_retrieve)
        reply = await self._shell_reply(msg_id, 60, generation)
        return builder.finish(reply["content"], time.monotonic() - started, reply.get("metadata", {}))

    async def _silently(self, code: str) -> bool:
        """Run `code` with nothing kept (no history, no execution count, its output not shown); whether it succeeded.
        For what the API does itself, e.g. AsyncSandboxPool's warm-up."""
        assert self.kernel is not None, "call start() first (or use the sandbox as a context manager)"
        generation = await self._settled()
        content = execute_content(code, silent=True, store_history=False, allow_stdin=False)
        msg_id = self.kernel.send("shell", "execute_request", content)
        reply = await self._shell_reply(msg_id, self.startup_timeout, generation)
        return bool(reply["content"].get("status") == "ok")

    async def _check_alive(self, generation: int) -> None:
        """KernelDied if the kernel a request went to has exited or was replaced (nothing will answer)."""
        assert self.kernel is not None
        self._check_generation(generation)
        died = await self.kernel.gone()
        if died is not None:
            raise died

    def _check_generation(self, generation: int) -> None:
        """KernelDied if restart() was called since a request was sent (the old kernel's answers do not count)."""
        if generation != self._generation:
            raise KernelDied("the kernel was restarted while this call waited on it; the sandbox's state is gone")

    async def _shell_reply(self, msg_id: str, timeout: float | None, generation: int) -> dict[str, Any]:
        """The shell reply to `msg_id`; KernelDied if the kernel exits first, TimeoutError after `timeout` s."""
        assert self.kernel is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                reply = await self.kernel.receive("shell", 0.5)
            except Empty:
                await self._check_alive(generation)
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"the kernel did not answer within {timeout:g}s") from None
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                self._check_generation(generation)  # a restart began: the old kernel's last word is not the answer
                answer: dict[str, Any] = reply
                return answer

    async def _answer_stdin(self) -> None:
        """Answer the kernel's pending input requests: skill approvals via the approver (refused without one),
        the guest's own prompts via `input` (EOF without it: an agent has no keyboard)."""
        assert self.kernel is not None
        while True:
            try:
                msg = await self.kernel.receive("stdin", 0)
            except Empty:
                return
            try:
                approval = approval_of(msg)
            except MalformedApproval:
                self._answer(msg, approval_answer(False))  # never approve what cannot be checked
                continue
            if approval is not None:
                verdict = (
                    self.approver(approval)
                    if self.approver is not None
                    else Refused(f"nobody to ask (this Sandbox has no approver=); {allow_hint(approval)}")
                )
                if asyncio.iscoroutine(verdict):
                    verdict = await verdict
                self._answer(msg, approval_answer(verdict))
            elif self.input is not None:
                prompt = msg["content"].get("prompt", "")
                asking: Awaitable[Any] = (
                    self.input(prompt)
                    if inspect.iscoroutinefunction(self.input)
                    else asyncio.to_thread(self.input, prompt)
                )
                line = await asking
                self._answer(msg, "\x04" if line is None else line)
            else:
                self._answer(msg, "\x04")  # input() in the guest gets EOFError

    def _answer(self, request: dict[str, Any], value: str) -> None:
        """An input_reply naming the prompt it answers (the kernel ignores answers to other prompts)."""
        assert self.kernel is not None
        self.kernel.send("stdin", "input_reply", {"value": value}, parent=request["header"])

    async def facts(self) -> dict[str, Any]:
        """What the kernel reports about its sandbox (kernel_info's sandbox_kernel): os_sandbox, mounts (guest
        paths and rules), skills (methods and policies), skill_approver, checkpoint_folder, max_checkpoints,
        settings_error."""
        assert self.kernel is not None, "call start() first (or use the sandbox as a context manager)"
        generation = await self._settled()
        msg_id = self.kernel.send("shell", "kernel_info_request", {})
        reply = await self._shell_reply(msg_id, self.startup_timeout, generation)
        return _object(reply["content"].get("sandbox_kernel"))

    async def os_layers(self) -> dict[str, Any]:
        """The OS layers confining the current sandbox process, as its launcher reported them."""
        return _object((await self.facts()).get("os_sandbox"))

    async def interrupt(self) -> None:
        assert self.kernel is not None, "call start() first (or use the sandbox as a context manager)"
        await self.kernel.interrupt()

    async def restart(self) -> None:
        """A fresh sandbox: every variable is gone."""
        assert self.kernel is not None, "call start() first (or use the sandbox as a context manager)"
        self._generation += 1  # calls waiting on the old process end with KernelDied
        self._restarting = asyncio.ensure_future(self._restart())
        await self._restarting

    async def _restart(self) -> None:
        assert self.kernel is not None
        await self.kernel.restart(self.startup_timeout)

    async def _settled(self) -> int:
        """Wait for a restart under way (e.g. from another thread) to finish; the kernel's generation."""
        if self._restarting is not None and not self._restarting.done():
            await asyncio.wait({self._restarting})
        return self._generation

    # ---- checkpoints ---------------------------------------------------------------------
    async def checkpoint(self, name: str | None = None) -> Checkpoint:
        """The session's state now (variables, the sandbox's files, installed packages), as a Checkpoint that
        outlives this sandbox: restore() it here, or start other sandboxes from it (fork, from_checkpoint).
        CheckpointError for a `name` that is not one (letters, digits, '_', '.' and '-'), before anything is sent."""
        name = name or f"checkpoint-{next(self._checkpoint_numbers)}"
        problem = name_problem(name)
        if problem:
            raise CheckpointError(problem)  # a newline would make the rest of it a cell of the guest's
        result = await self._kernel_magic(f"%checkpoint {name}")
        facts = result.pop("checkpoint", None)
        if not isinstance(facts, dict):
            raise CheckpointError("the kernel did not say where it saved the checkpoint")
        assert self.kernel is not None
        if not self.kernel.shares_files:  # a gateway's kernel: the bytes come over the protocol
            return await remote_checkpoints.take(self._kernel_magic, name, facts.get("bytes"))
        path = facts.get("path")
        if not isinstance(path, str):
            raise CheckpointError(f"the kernel gave {path!r:.100} as the path of checkpoint {name!r}")
        return await asyncio.to_thread(Checkpoint.taken_from, Path(path))

    async def restore(self, checkpoint: Checkpoint) -> None:
        """Bring back `checkpoint`'s state in a fresh sandbox (what ran since is gone)."""
        name = f"given-{next(self._checkpoint_numbers)}"
        assert self.kernel is not None, "call start() first (or use the sandbox as a context manager)"
        if not self.kernel.shares_files:  # a gateway's kernel: the bytes go over the protocol
            await remote_checkpoints.give(self._kernel_magic, checkpoint, name)
            try:
                await self._kernel_magic(f"%restore {name}")
            finally:
                await self._kernel_magic(f"%checkpoint_drop {name}")
            return
        folder = (await self.facts()).get("checkpoint_folder")  # the kernel's (a restart makes a new one)
        if not folder:
            raise CheckpointError("this kernel did not say where it takes checkpoints (not a sandbox-kernel?)")
        await asyncio.to_thread(checkpoint.give_to, Path(folder), name)
        try:
            await self._kernel_magic(f"%restore {name}")
        finally:
            (Path(folder) / f"{name}.sbkcp").unlink(missing_ok=True)

    async def fork(self) -> AsyncSandbox:
        """A second sandbox, with this one's settings, started from this one's state now."""
        return await self.from_checkpoint(await self.checkpoint(), **self._settings)

    @classmethod
    async def from_checkpoint(cls, checkpoint: Checkpoint, **options: Unpack[SandboxOptions]) -> AsyncSandbox:
        """A new sandbox (keywords as for AsyncSandbox) started from `checkpoint`."""
        sandbox = await cls(**options).start()
        try:
            await sandbox.restore(checkpoint)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def _kernel_magic(self, line: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run a cell the kernel serves itself (%checkpoint, %restore, %checkpoint_get, ...; `metadata`: the
        request's); returns the reply's sandbox_kernel facts; CheckpointError on failure."""
        assert self.kernel is not None, "call start() first (or use the sandbox as a context manager)"
        generation = await self._settled()
        content = execute_content(line, silent=True, store_history=False)
        msg_id = self.kernel.send("shell", "execute_request", content, metadata=metadata)
        reply = await self._shell_reply(msg_id, None, generation)
        content = reply["content"]
        if content.get("status") != "ok":
            raise CheckpointError(f"{content.get('ename')}: {content.get('evalue')}")
        return _object(reply["metadata"].get("sandbox_kernel"))

    async def upload(self, host_path: str | Path, guest_path: str) -> int:
        """Copy a host file into the sandbox's own file system; returns the byte count. (The helper code is all
        expressions: it leaves no names in the user's namespace.)"""
        data = await asyncio.to_thread(Path(host_path).read_bytes)
        os_ = "__import__('os')"
        folder = f"{os_}.path.dirname({guest_path!r}) or '.'"
        await self._evaluate(f"{os_}.makedirs({folder}, exist_ok=True) or open({guest_path!r}, 'wb').close()")
        for start in range(0, len(data), CHUNK):
            chunk = base64.b64encode(data[start : start + CHUNK]).decode()
            write = f"f.write(__import__('base64').b64decode({chunk!r}))"
            await self._evaluate(f"(lambda f: ({write}, f.close())[0])(open({guest_path!r}, 'ab'))")
        return len(data)

    async def download(self, guest_path: str, max_bytes: int | None = None) -> bytes:
        """The bytes of a file in the sandbox's file system; OSError if it has more than `max_bytes`.

        Nothing the guest says is trusted: its reported size only refuses a file early; the bytes come in reads
        of a size chosen here, an answer longer than asked for is refused before it is decoded, and reading ends
        at `max_bytes` + 1 bytes whatever size the guest claims. (Expressions only: no names are left behind.)"""
        try:
            said = await self._evaluate(f"__import__('os').path.getsize({guest_path!r})")
        except GuestError as exc:
            if exc.ename == "FileNotFoundError":
                raise FileNotFoundError(errno.ENOENT, "no such file in the sandbox", guest_path) from None
            raise
        size = reported_size(said, guest_path)
        if max_bytes is not None and size > max_bytes:
            raise OSError(f"{guest_path} has {size} bytes, more than the {max_bytes} allowed")
        parts: list[bytes] = []
        total = 0
        while True:
            asked = CHUNK if max_bytes is None else min(CHUNK, max_bytes + 1 - total)
            read = (f"(lambda f: (f.seek({total}), __import__('base64').b64encode(f.read({asked})).decode(), "
                    f"f.close())[1])(open({guest_path!r}, 'rb'))")  # fmt: skip
            chunk = chunk_bytes(await self._evaluate(read), asked, guest_path)
            parts.append(chunk)
            total += len(chunk)
            if max_bytes is not None and total > max_bytes:
                raise OSError(
                    f"{guest_path} has more than the {max_bytes} bytes allowed (the sandbox said {size}); "
                    f"the read stopped at {total} bytes"
                )
            if len(chunk) < asked:
                return b"".join(parts)

    async def _evaluate(self, expression: str) -> str:
        """The str of `expression`, evaluated in the guest as a user expression of an empty silent cell: no name is
        bound, nothing enters the history or moves the execution count."""
        assert self.kernel is not None, "call start() first (or use the sandbox as a context manager)"
        generation = await self._settled()
        content = execute_content("", silent=True, store_history=False, user_expressions={"v": expression})
        msg_id = self.kernel.send("shell", "execute_request", content)
        reply = await self._shell_reply(msg_id, 120, generation)
        content = reply["content"]
        if content.get("status") != "ok":
            raise GuestError(str(content.get("ename")), str(content.get("evalue")))
        value = _object(_object(content.get("user_expressions")).get("v"))
        if value.get("status") != "ok":
            raise GuestError(str(value.get("ename")), str(value.get("evalue")))
        text = str(_object(value.get("data")).get("text/plain"))
        return text[1:-1] if text[:1] in "'\"" else text


class GuestError(OSError):
    """An expression the host evaluated in the guest (download) raised `ename`; the message is the guest's."""

    def __init__(self, ename: str, evalue: str) -> None:
        super().__init__(f"{ename}: {evalue}")
        self.ename = ename


def _object(value: Any) -> dict[str, Any]:
    """A copy of `value` if it is a JSON object (a kernel's facts), else {}: a gateway may send anything."""
    return dict(value) if isinstance(value, dict) else {}


def _retrieve(future: asyncio.Future[None]) -> None:
    """Take a finished future's outcome (an error nobody waits for any more is not reported as never retrieved)."""
    if not future.cancelled():
        future.exception()

"""`sandbox-kernel mcp`: a Model Context Protocol server whose tools drive one persistent sandbox (AsyncSandbox)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import mimetypes
import os
import posixpath
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import quote

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    TextContent,
)
from pydantic import Field

from sandbox_kernel import __version__
from sandbox_kernel.checkpoints.cells import name_problem
from sandbox_kernel.checkpoints.client import Checkpoint, CheckpointError
from sandbox_kernel.client.agent import AsyncSandbox, GatewayError, SandboxOptions, SandboxSettingsError
from sandbox_kernel.client.approvals import ApprovalRequest, Refused, allow_hint
from sandbox_kernel.client.gateway_rest import TOKEN_ENV as GATEWAY_TOKEN_ENV
from sandbox_kernel.client.gateway_rest import checked_env, checked_url
from sandbox_kernel.client.mcp_http import TokenError, credential, serve_http
from sandbox_kernel.client.results import ExecutionResult
from sandbox_kernel.jupyter import setting_sources

MAX_FILE_BYTES = 4 << 20  # one upload_file or download_file
IMAGE_TYPES = ("image/png", "image/jpeg")  # outputs passed on as images
INSTRUCTIONS = (
    "A persistent Python sandbox (Pyodide, CPython on WebAssembly, with IPython): variables, imports and files "
    "persist across run_python calls until restart. Host files are reachable only in the configured mounts; "
    "host skills are called from the code as device.Skill.method(...) (list_skills shows them)."
)
T = TypeVar("T")


class SandboxSession:
    """The one sandbox every tool call uses: started on first need, used by one call at a time."""

    def __init__(self, options: SandboxOptions) -> None:
        self.options = options  # the sandbox's: settings as kernel arguments, or a gateway's URL and token
        self.lock = asyncio.Lock()
        self.facts: dict[str, Any] = {}  # kernel_info's sandbox_kernel facts: mounts, skills, ...
        self.checkpoints: dict[str, Checkpoint] = {}  # this server's, by name (files it owns until it exits)
        self._sandbox: AsyncSandbox | None = None

    async def _started(self) -> AsyncSandbox:
        """The running sandbox, started now if need be; only with the lock held."""
        if self._sandbox is None:
            options: SandboxOptions = {**self.options, "approver": nobody_to_ask}
            sandbox = AsyncSandbox(**options)
            try:
                await sandbox.start()
                self.facts = await sandbox.facts()
            except BaseException as exc:
                with anyio.CancelScope(shield=True):
                    await sandbox.close()
                if isinstance(exc, (SandboxSettingsError, GatewayError)):  # what the user must fix, in its words
                    raise ToolError(str(exc)) from None
                raise
            self._sandbox = sandbox
        return self._sandbox

    async def use(self, action: Callable[[AsyncSandbox], Awaitable[T]]) -> T:
        """`action(sandbox)`, alone; a failure of the sandbox's own becomes a tool error naming it."""
        async with self.lock:
            sandbox = await self._started()
            try:
                return await action(sandbox)
            except ToolError:
                raise
            except FileNotFoundError as exc:  # said plainly, with the path (the class name adds nothing)
                raise ToolError(f"no such file in the sandbox: {exc.filename}") from None
            except (OSError, RuntimeError, TimeoutError, CheckpointError) as exc:
                raise ToolError(f"{type(exc).__name__}: {exc}") from None

    async def warm(self) -> None:
        """Start the sandbox ahead of the first call; a failure is reported by that call."""
        try:
            async with self.lock:
                await self._started()
        except Exception as exc:
            logging.getLogger(__name__).warning("the sandbox did not start: %s", exc)

    async def close(self) -> None:
        async with self.lock:
            if self._sandbox is not None:
                await self._sandbox.close()
                self._sandbox = None

    def mount_of(self, path: str, writing: bool) -> str:
        """`path` normalised, if it lies inside a mount (a writable one for `writing`); else a ToolError."""
        mounts = self.facts.get("mounts", [])
        usable = [m for m in mounts if m["writable"] or not writing]
        allowed = ", ".join(f"{m['guest']} ({'read-write' if m['writable'] else 'read-only'})" for m in usable)
        allowed = allowed or "none (SandboxKernel.mounts and working_folder name no such folder)"
        guest = posixpath.normpath(path) if path.startswith("/") and not path.startswith("//") else ""
        for mount in mounts:
            if guest.startswith(mount["guest"].rstrip("/") + "/"):
                if writing and not mount["writable"]:
                    raise ToolError(f"{mount['guest']} is mounted read-only; writable mounts: {allowed}")
                return guest
        raise ToolError(f"{path!r} is not a file path inside a mount; files move only in the mounts: {allowed}")


def nobody_to_ask(request: ApprovalRequest) -> Refused:
    """'ask' calls are refused (an MCP client is a program, not the person to ask), saying how to allow them."""
    return Refused(f"the MCP server has nobody to ask; {allow_hint(request)}, or set SandboxKernel.skill_approver")


def execution_content(result: ExecutionResult) -> list[ContentBlock]:
    """to_llm()'s text, then every PNG or JPEG the cell displayed or returned."""
    content: list[ContentBlock] = [TextContent(type="text", text=result.to_llm())]
    bundles = [out.get("data", {}) for out in result.outputs] + ([result.result] if result.result else [])
    for bundle in bundles:
        kind = next((k for k in IMAGE_TYPES if isinstance(bundle.get(k), str)), None)
        if kind is not None:
            content.append(ImageContent(type="image", data="".join(bundle[kind].split()), mime_type=kind))
    return content


def skills_text(skills: dict[str, Any], approver: bool) -> str:
    """The skills, each method with its signature, policy and first doc line, for a model to read."""
    if not skills:
        return "No skills are loaded (SandboxKernel.skills, skills_path)."
    ask = "ask (SandboxKernel.skill_approver decides)" if approver else "ask (refused: no skill_approver is set)"
    lines = ["Call them in run_python as device.Skill.method(...)."]
    for name, skill in skills.items():
        lines.append(f"{name}: {skill['doc'].splitlines()[0]}" if skill["doc"] else name)
        for method, info in skill["methods"].items():
            policy = ask if info["policy"] == "ask" else info["policy"]
            doc = info["doc"].splitlines()[0] if info["doc"] else ""
            lines.append(f"  {method}{info['signature']} [{policy}]{' ' + doc if doc else ''}")
    return "\n".join(lines)


def file_content(path: str, data: bytes) -> ContentBlock:
    """UTF-8 text as text, PNG/JPEG as an image, anything else as an embedded base64 resource."""
    kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if kind in IMAGE_TYPES:
        return ImageContent(type="image", data=base64.b64encode(data).decode(), mime_type=kind)
    try:
        return TextContent(type="text", text=data.decode("utf-8"))
    except UnicodeDecodeError:
        blob = BlobResourceContents(uri=f"file://{quote(path)}", blob=base64.b64encode(data).decode(), mime_type=kind)
        return EmbeddedResource(type="resource", resource=blob)


def _spill(data: bytes) -> str:
    """A private temporary host file holding `data` (what AsyncSandbox.upload copies from)."""
    fd, name = tempfile.mkstemp(prefix="sandbox-kernel-mcp-")
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    return name


class SandboxTools:
    """The MCP tools; each docstring is what the client's model reads."""

    def __init__(self, session: SandboxSession) -> None:
        self.session = session

    async def run_python(self, code: Annotated[str, Field(description="Python (IPython) code to run")]) -> Any:
        """Run Python code in the persistent sandbox; returns its output, result and images. Variables persist."""

        async def run(sandbox: AsyncSandbox) -> ExecutionResult:
            try:
                return await sandbox.run(code)
            except asyncio.CancelledError:  # the client gave up: stop the cell rather than let it run on
                with anyio.CancelScope(shield=True):
                    await sandbox.interrupt()
                raise

        result = await self.session.use(run)
        # What the step cost, as the kernel measured it (wall_s, cpu_s, peak_memory_bytes, output_bytes, skill_calls).
        cost = {"metrics": result.metrics, "timed_out": result.timed_out, "restarted": result.restarted}
        return CallToolResult(content=execution_content(result), structured_content=cost, is_error=not result.ok)

    async def restart(self) -> str:
        """Restart the sandbox: every variable, import and file outside the mounts is gone."""
        await self.session.use(lambda sandbox: sandbox.restart())
        return "The sandbox was restarted: every variable is gone."

    async def checkpoint(self, name: Annotated[str, Field(description="the checkpoint's name")]) -> str:
        """Save the sandbox's state (variables, files outside the mounts, packages) under a name, to restore later."""
        problem = name_problem(name)
        if problem:
            raise ToolError(problem)

        async def take(sandbox: AsyncSandbox) -> Checkpoint:
            limit = int(self.session.facts.get("max_checkpoints", 20))
            if name not in self.session.checkpoints and len(self.session.checkpoints) >= limit:
                known = ", ".join(repr(n) for n in sorted(self.session.checkpoints))
                raise ToolError(
                    f"at most {limit} checkpoints are kept (SandboxKernel.max_checkpoints); reuse a name to replace "
                    f"that checkpoint: {known}"
                )
            return await sandbox.checkpoint(name)

        saved = await self.session.use(take)
        self.session.checkpoints[name] = saved  # the one replaced is deleted once no call holds it any more
        return saved.summary()

    async def restore(self, name: Annotated[str, Field(description="a name given to checkpoint")]) -> str:
        """Put the sandbox back in the state saved by checkpoint(name)."""
        saved = self.session.checkpoints.get(name)
        if saved is None:
            known = ", ".join(repr(n) for n in sorted(self.session.checkpoints)) or "none yet"
            raise ToolError(f"there is no checkpoint {name!r}; known checkpoints: {known}")
        await self.session.use(lambda sandbox: sandbox.restore(saved))
        return f"Restored checkpoint {name!r}: what ran since is gone."

    async def upload_file(
        self,
        path: Annotated[str, Field(description="absolute guest path inside a writable mount")],
        content: Annotated[str, Field(description="the file's content: text, or base64 with encoding='base64'")],
        encoding: Annotated[Literal["utf-8", "base64"], Field(description="how content is given")] = "utf-8",
    ) -> str:
        """Write a file into a writable mount of the sandbox (at most 4 MiB)."""
        try:
            data = content.encode() if encoding == "utf-8" else base64.b64decode(content, validate=True)
        except binascii.Error as exc:
            raise ToolError(f"content is not valid base64: {exc}") from None
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(f"the file has {len(data)} bytes, more than the {MAX_FILE_BYTES} allowed")

        async def upload(sandbox: AsyncSandbox) -> str:
            guest = self.session.mount_of(path, writing=True)
            host = await asyncio.to_thread(_spill, data)
            try:
                size = await sandbox.upload(host, guest)
            finally:
                await asyncio.to_thread(os.unlink, host)
            return f"Wrote {size} bytes to {guest}."

        return await self.session.use(upload)

    async def download_file(self, path: Annotated[str, Field(description="absolute guest path inside a mount")]) -> Any:
        """Read a file from a mount of the sandbox (at most 4 MiB): text, an image, or a base64 resource."""

        async def download(sandbox: AsyncSandbox) -> CallToolResult:
            guest = self.session.mount_of(path, writing=False)
            data = await sandbox.download(guest, MAX_FILE_BYTES)
            return CallToolResult(content=[file_content(guest, data)])

        return await self.session.use(download)

    async def list_skills(self) -> Any:
        """List the host skills the code may call as device.Skill.method(...), with each method's policy."""

        async def facts(sandbox: AsyncSandbox) -> dict[str, Any]:
            return await sandbox.facts()  # policies change as calls are approved for the session

        found = await self.session.use(facts)
        skills = found.get("skills", {})
        text = skills_text(skills, bool(found.get("skill_approver")))
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content={"skills": skills})


class UsageError(ValueError):
    """Options of `sandbox-kernel mcp` that do not go together; the message says which and why."""


def sandbox_options(
    arguments: list[str],
    gateway_url: str | None,
    token_env: str | None,
    environ: dict[str, str] | os._Environ[str],
    kernel_name: str | None = None,
    env_words: list[str] | None = None,
) -> SandboxOptions:
    """The sandbox's options: the kernel settings given (`--SandboxKernel.x=...`) for a local kernel, or a
    gateway's URL with its token, taken out of the environment (`token_env`, else SANDBOX_KERNEL_GATEWAY_TOKEN),
    the gateway's kernelspec (`kernel_name`) and the "env" of its start request (`env_words`: NAME=VALUE)."""
    if not gateway_url:
        given = {"--gateway-token-env": token_env, "--kernel-name": kernel_name, "--gateway-env": env_words}
        stray = next((option for option, value in given.items() if value), None)
        if stray:
            raise UsageError(f"{stray} applies only with --gateway-url")
        sources = setting_sources.argument(setting_sources.of_command("sandbox-kernel mcp", arguments))
        return {"extra_arguments": [*arguments, sources]}  # the kernel's messages name the options given here
    if arguments:
        raise UsageError(
            f"{arguments[0].split('=', 1)[0]}=...: kernel settings cannot be given with --gateway-url; the gateway's "
            "kernels take theirs from the gateway machine's sandbox_kernel_config.py (docs/gateway.md)"
        )
    try:
        checked_url(gateway_url)
    except ValueError as exc:
        raise UsageError(str(exc).replace("gateway_url=", "--gateway-url ")) from None
    options: SandboxOptions = {}
    if kernel_name is not None:
        options["kernel_name"] = kernel_name
    if env_words:
        options["gateway_env"] = gateway_env(env_words)
    name = token_env or GATEWAY_TOKEN_ENV
    token = environ.pop(name, None)
    if token_env and not token:
        raise UsageError(f"--gateway-token-env {name}: the environment has no {name} (or it is empty)")
    return {"gateway_url": gateway_url, "gateway_token": token or None, **options}


def gateway_env(words: list[str]) -> dict[str, str]:
    """The --gateway-env NAME=VALUE words as a dict; UsageError for a word that is not one."""
    env: dict[str, str] = {}
    for word in words:
        name, equals, value = word.partition("=")
        if not equals:
            raise UsageError(f"--gateway-env {word!r}: give NAME=VALUE (e.g. --gateway-env KERNEL_USERNAME=alice)")
        env[name] = value
    try:
        return checked_env(env)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc).replace("gateway_env", "--gateway-env", 1)) from None


def build(options: SandboxOptions) -> MCPServer[None]:
    """The server, its tools bound to one SandboxSession started with `options`."""
    session = SandboxSession(options)

    @asynccontextmanager
    async def lifespan(_: MCPServer[None]) -> AsyncIterator[None]:
        warming = asyncio.ensure_future(session.warm())  # inside the transport: stdout is no longer the wire
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await warming
                await session.close()

    server: MCPServer[None] = MCPServer(
        "sandbox-kernel", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING"
    )
    tools = SandboxTools(session)
    for tool in (
        tools.run_python,
        tools.restart,
        tools.checkpoint,
        tools.restore,
        tools.upload_file,
        tools.download_file,
        tools.list_skills,
    ):
        server.add_tool(tool, structured_output=False)
    return server


def main(
    arguments: list[str],
    port: int | None,
    token_file: str | None = None,
    gateway_url: str | None = None,
    gateway_token_env: str | None = None,
    kernel_name: str | None = None,
    gateway_env_words: list[str] | None = None,
) -> int:
    """Serve over stdio, or streamable HTTP on 127.0.0.1:`port` behind a bearer token, until the client or a
    signal ends it; 2 if the options cannot be used (a token, a gateway with kernel settings)."""
    try:
        options = sandbox_options(arguments, gateway_url, gateway_token_env, os.environ, kernel_name, gateway_env_words)
        if port is None:
            if token_file is not None:
                raise TokenError("--token-file applies only with --http")
            anyio.run(build(options).run_stdio_async)
        else:
            anyio.run(serve_http, build(options), port, credential(token_file, os.environ))
    except (TokenError, UsageError) as exc:
        print(f"sandbox-kernel mcp: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0

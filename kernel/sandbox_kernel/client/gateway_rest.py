"""The REST half of a Jupyter Kernel Gateway or Enterprise Gateway: kernels started, looked up, interrupted,
restarted and shut down (`/api/kernels...`, with the header `Authorization: token <t>`).

Every failure is one GatewayError naming the gateway (its URL without credentials), the request and the HTTP
status; the token is never part of a message. The gateway is not trusted: an answer is read up to MAX_BODY_BYTES
(more is refused), ids are quoted whole into paths, and every value is checked for its type before use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

TOKEN_ENV = "SANDBOX_KERNEL_GATEWAY_TOKEN"  # where the agent API and `sandbox-kernel mcp` find a gateway's token
REQUEST_TIMEOUT = 30.0  # seconds for a request other than starting or restarting a kernel
MAX_BODY_BYTES = 4 << 20  # of a REST answer (a kernel's model, the list of kernelspecs: kilobytes)
MAX_SAID = 500  # characters of a refusal's reason and message shown (EG's name the kernel, the host and the cause)


class GatewayError(OSError):
    """A gateway could not be reached or refused a request; `status` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url  # as shown: without credentials
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])


def checked_url(url: str) -> str:
    """`url` without a trailing '/', if it is an http(s) URL a gateway can be at; ValueError saying why not."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"gateway_url={shown(url)!r} is not an http:// or https:// URL of a gateway")
    if parts.query or parts.fragment:
        raise ValueError(
            f"gateway_url={shown(url)!r} has a query or fragment; give the gateway's base URL, and its token as "
            f"gateway_token (or in ${TOKEN_ENV})"
        )
    return url.rstrip("/")


def checked_env(env: object) -> dict[str, str]:
    """`env` (gateway_env) as a start request carries it to the gateway: names and values are strings; ValueError
    (TypeError for a value of the wrong type) saying which is not."""
    if not isinstance(env, dict):
        raise TypeError(f"gateway_env must be a dict of environment variable names to str values, not {env!r:.100}")
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"gateway_env: {name!r:.100} is not an environment variable's name")
        if not isinstance(value, str):
            raise TypeError(
                f"gateway_env[{name!r}] must be a str (the gateway refuses other values), not {value!r:.100}"
            )
        if "\0" in value:
            raise ValueError(f"gateway_env[{name!r}] has a NUL character, which no environment variable can hold")
    return dict(env)


def shown(url: str) -> str:
    """`url` as messages show it: no user name, password, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc += f":{port}" if port else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class Answer:
    """A gateway's answer to a REST request: its status, reason phrase and body (at most MAX_BODY_BYTES)."""

    status: int
    reason: str
    body: bytes


def printable(text: str) -> str:
    """`text` without control characters (a gateway's words, shown in an error message)."""
    return "".join(c if c.isprintable() else "?" for c in text)


class GatewayRest:
    """Requests to one gateway (each instance its own: sandboxes in one process may use different gateways)."""

    def __init__(self, url: str, token: str | None) -> None:
        self.base = checked_url(url)
        self.shown = shown(self.base)
        self.headers = {"Authorization": f"token {token}"} if token else {}
        self._http = httpx.AsyncClient(headers=self.headers, timeout=REQUEST_TIMEOUT)

    def websocket_url(self, kernel_id: str, session_id: str) -> str:
        """The kernel's channels: ws:// (wss:// for https://) .../api/kernels/<id>/channels?session_id=..."""
        scheme = "wss" if self.base.startswith("https:") else "ws"
        rest = self.base.split(":", 1)[1]
        return f"{scheme}:{rest}{kernel_path(kernel_id)}/channels?session_id={quote(session_id, safe='')}"

    async def call(self, method: str, path: str, timeout: float = REQUEST_TIMEOUT, body: Any = None) -> Any:
        """The JSON answer (None for an empty one) of `method path`; GatewayError for no answer, an error status or
        an answer of more than MAX_BODY_BYTES."""
        try:
            answer = await self._request(method, path, timeout, body)
        except httpx.TimeoutException:
            raise GatewayError(
                f"the gateway at {self.shown} did not answer {method} {path} within {timeout:g}s", self.shown
            ) from None
        except httpx.HTTPError as exc:
            raise GatewayError(
                f"cannot reach the gateway at {self.shown} ({method} {path}): {exc}", self.shown
            ) from None
        if answer.status >= 400:
            raise GatewayError(self._refusal(method, path, answer), self.shown, answer.status)
        try:
            return json.loads(answer.body) if answer.body else None
        except ValueError:
            raise GatewayError(
                f"the gateway at {self.shown} answered {method} {path} with something that is not JSON "
                f"(HTTP {answer.status}): is it a Jupyter Kernel Gateway?",
                self.shown,
                answer.status,
            ) from None

    async def _request(self, method: str, path: str, timeout: float, body: Any) -> Answer:
        """The answer to one request, its body read up to MAX_BODY_BYTES (decompressed); GatewayError beyond."""
        request = self._http.build_request(method, self.base + path, json=body, timeout=timeout)
        response = await self._http.send(request, stream=True)
        try:
            received = bytearray()
            async for chunk in response.aiter_bytes():
                received += chunk
                if len(received) > MAX_BODY_BYTES:
                    raise GatewayError(
                        f"the gateway at {self.shown} answered {method} {path} with more than {MAX_BODY_BYTES} "
                        f"bytes (HTTP {response.status_code}), far more than a gateway's answer holds: refused",
                        self.shown,
                        response.status_code,
                    )
        finally:
            await response.aclose()
        return Answer(response.status_code, response.reason_phrase, bytes(received))

    def _refusal(self, method: str, path: str, answer: Answer) -> str:
        """What a refused request says: the status, the gateway's own short message, and what to check."""
        said = ""
        try:
            found = json.loads(answer.body)
            message = found.get("message") if isinstance(found, dict) else None
            if isinstance(message, str) and message.strip():
                said = f" ({printable(message.strip()[:MAX_SAID])})"
        except ValueError:
            pass
        status, reason = answer.status, printable(answer.reason[:MAX_SAID])
        hint = ""
        if status == 401:
            hint = f"; gateway_token (or ${TOKEN_ENV}) is missing or is not the gateway's auth token"
        elif status == 403 and "KERNEL_USERNAME" in reason + said:  # Enterprise Gateway's refusal
            hint = (
                "; Enterprise Gateway starts kernels only for a KERNEL_USERNAME it authorizes (by default its own "
                "user, unless that is root): give one with gateway_env={'KERNEL_USERNAME': NAME} "
                "(sandbox-kernel mcp: --gateway-env KERNEL_USERNAME=NAME)"
            )
        return f"the gateway at {self.shown} refused {method} {path}: HTTP {status} {reason}{said}{hint}"

    async def start_kernel(self, name: str, timeout: float, env: dict[str, str] | None = None) -> str:
        """A new kernel of kernelspec `name`, with `env` (the request's "env": e.g. Enterprise Gateway's
        KERNEL_USERNAME); its id. A kernel the gateway does not have is named as such."""
        body: dict[str, Any] = {"name": name, **({"env": env} if env else {})}
        try:
            model = await self.call("POST", "/api/kernels", timeout, body)
        except GatewayError as exc:
            if exc.status is None or exc.status in (401, 403):
                raise
            names = await self._kernel_names()
            if names is not None and name not in names:
                raise GatewayError(
                    f"the gateway at {self.shown} has no kernel named {name!r} (POST /api/kernels: HTTP "
                    f"{exc.status}); it has {', '.join(map(repr, names)) or 'none'}",
                    self.shown,
                    exc.status,
                ) from None
            raise
        if not isinstance(model, dict) or not isinstance(model.get("id"), str):
            raise GatewayError(f"the gateway at {self.shown} started a kernel but did not give its id", self.shown)
        return str(model["id"])

    async def _kernel_names(self) -> list[str] | None:
        """The gateway's kernelspecs (None if it does not say)."""
        try:
            found = await self.call("GET", "/api/kernelspecs")
        except GatewayError:
            return None
        specs = found.get("kernelspecs") if isinstance(found, dict) else None
        return sorted(specs) if isinstance(specs, dict) else None

    async def kernel_exists(self, kernel_id: str, timeout: float) -> bool | None:
        """Whether the gateway still has the kernel (None: it did not say)."""
        try:
            await self.call("GET", kernel_path(kernel_id), timeout)
        except GatewayError as exc:
            return False if exc.status == 404 else None
        return True

    async def interrupt(self, kernel_id: str) -> None:
        """Ask the gateway to interrupt the kernel (as its kernelspec's interrupt_mode says)."""
        await self.call("POST", f"{kernel_path(kernel_id)}/interrupt")

    async def restart(self, kernel_id: str, timeout: float) -> None:
        """Restart the kernel (the gateway answers once the new process answers)."""
        await self.call("POST", f"{kernel_path(kernel_id)}/restart", timeout)

    async def shutdown(self, kernel_id: str) -> None:
        """Ask the gateway to shut the kernel down (GatewayError with status 404 if it no longer has it)."""
        await self.call("DELETE", kernel_path(kernel_id))

    async def aclose(self) -> None:
        """Close the HTTP client and its connections."""
        await self._http.aclose()


def kernel_path(kernel_id: str) -> str:
    """/api/kernels/<id>, the id quoted whole: a '/' or '..' in an id a gateway gave stays inside the segment."""
    return f"/api/kernels/{quote(kernel_id, safe='')}"

"""The second wall in the page: a Content-Security-Policy for the Jupyter server's pages (issue 32).

The kernel cleans what the sandbox sends to the browser (sanitize.py, url_reach.py, widget_guard.py); this
policy stands behind that cleaning. This module is a Jupyter server extension: `sandbox-kernel install
--page-policy` enables it with a file in a Jupyter config folder's jupyter_server_config.d/ (a server reads only
`jpserver_extensions` from those files, so the header cannot be set there directly), and once loaded it sets the
Content-Security-Policy header of every page that server sends, whatever kernel a notebook runs on: JupyterLab's
own scripts (files on the server) run, while a script, an inline event handler or a javascript: URL in an output
does not, and the page fetches, connects to and frames nothing but the server itself, data: and blob:.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from jupyter_core.paths import ENV_CONFIG_PATH, SYSTEM_CONFIG_PATH, jupyter_config_dir, jupyter_config_path

FILE_NAME = "sandbox_kernel_page_policy.json"
SERVER_FOLDER = "jupyter_server_config.d"  # enables the extension below
LAB_FOLDER = "labconfig/page_config.d"  # JupyterLab's page config: what it leaves out
# JupyterLab's page (jupyterlab/static/index.html) has one inline script, which takes the token out of the address
# bar: allowed by its hash (JupyterLab 4.6), nothing else inline runs. Another JupyterLab leaves the token there
# (and its console names the hash it wants); tests/test_page_policy.py checks that it goes.
LAB_TOKEN_SCRIPT = "'sha256-DHk7PmJD5wtdpNjEzpkYISzoAstMGRwG1GNWZ25R2pM='"
DIRECTIVES: dict[str, tuple[str, ...]] = {
    "default-src": ("'none'",),
    # No 'unsafe-inline': no <script>, onerror= or javascript: URL in an output runs. 'unsafe-eval' JupyterLab 4
    # needs (its settings are checked by ajv, which compiles each JSON schema with `new Function`; without it Lab
    # does not start): scripts already running may eval, so the one renderer that evals what an output holds
    # (@jupyterlab/javascript-extension, for application/javascript) is switched off in LAB_CONFIG.
    "script-src": ("'self'", "'unsafe-eval'", LAB_TOKEN_SCRIPT),
    "style-src": ("'self'", "'unsafe-inline'"),  # Lab and its widgets set inline styles; CSS can fetch nothing
    "img-src": ("'self'", "data:", "blob:"),
    "media-src": ("'self'", "data:", "blob:"),
    "font-src": ("'self'", "data:"),
    "connect-src": ("'self'",),  # the API and, in CSP 3, the kernel websocket (ws:/wss: to the same host)
    "worker-src": ("'self'", "blob:"),
    "frame-src": ("'self'", "blob:"),
    "child-src": ("'self'", "blob:"),
    "manifest-src": ("'self'",),
    "object-src": ("'none'",),
    "base-uri": ("'self'",),
    "form-action": ("'self'",),
    "frame-ancestors": ("'self'",),  # jupyter_server's own default, which a policy set in its settings replaces
}
LAB_CONFIG: dict[str, object] = {"disabledExtensions": {"@jupyterlab/javascript-extension": True}}


def policy() -> str:
    """The Content-Security-Policy header's value."""
    return "; ".join(f"{name} {' '.join(sources)}" for name, sources in DIRECTIVES.items())


EXTENSION = __name__  # sandbox_kernel.jupyter.page_policy
HEADER = "Content-Security-Policy"


def server_config() -> dict[str, object]:
    """The jupyter_server config file that enables this extension."""
    return {"ServerApp": {"jpserver_extensions": {EXTENSION: True}}}


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": EXTENSION}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Set the header for every handler of the server (each reads it from the application's settings per request;
    jupyter_server's own additions, e.g. `sandbox allow-scripts` on /files/ and `default-src 'none'` on the API,
    are appended to it)."""
    headers = serverapp.web_app.settings.setdefault("headers", {})
    before = headers.get(HEADER)
    headers[HEADER] = policy()
    if before and before != headers[HEADER]:
        serverapp.log.warning("sandbox-kernel page policy: replaced the %s set in ServerApp.tornado_settings", HEADER)
    serverapp.log.info(
        "sandbox-kernel page policy in force: outputs cannot run scripts or load from other hosts (%s)",
        "`jupyter server extension disable sandbox_kernel.jupyter.page_policy` or `sandbox-kernel uninstall` "
        "turns it off",
    )


def config_base(user: bool, prefix: str | None) -> Path:
    """The Jupyter config folder install writes to, as the kernelspec goes: the user's, a prefix's etc/jupyter, or
    the system's."""
    if user:
        return Path(jupyter_config_dir())
    if prefix:
        return Path(prefix) / "etc" / "jupyter"
    return Path(SYSTEM_CONFIG_PATH[0])


def files(base: Path) -> dict[Path, dict[str, object]]:
    """The config files, by path, in the Jupyter config folder `base`."""
    return {base / SERVER_FOLDER / FILE_NAME: server_config(), base / LAB_FOLDER / FILE_NAME: LAB_CONFIG}


def install(user: bool = False, prefix: str | None = None) -> list[Path]:
    """Write the config files; returns their paths."""
    written = files(config_base(user, prefix))
    for path, content in written.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=2) + "\n")
    return list(written)


def installed_files(user: bool, sys_prefix: bool, prefix: str | None) -> list[Path]:
    """Where uninstall looks: the one place a flag names, else every folder Jupyter reads config from."""
    if user or sys_prefix or prefix:
        bases = [config_base(user, sys.prefix if sys_prefix else prefix)]
    else:
        bases = [Path(base) for base in dict.fromkeys([*jupyter_config_path(), *ENV_CONFIG_PATH, *SYSTEM_CONFIG_PATH])]
    return [path for base in bases for path in files(base)]

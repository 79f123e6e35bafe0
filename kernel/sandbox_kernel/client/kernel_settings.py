"""The kernel's settings as the agent API's keywords, typed: `Sandbox(**settings: Unpack[KernelSettings])`.

Generated from the kernel's traits by `python -m sandbox_kernel.client.keywords_doc`: do not edit (tests/unit/test_keywords.py checks it).
"""

from __future__ import annotations

from os import PathLike
from typing import Any, Literal, TypedDict


class KernelSettings(TypedDict, total=False):
    """Every kernel setting (docs/configuration.md); one left out keeps what the kernel's configuration says."""

    allow_net: list[str]
    """Hosts the sandbox may connect to: 'host', 'host:port', 'IP' or 'IP:port'. None by default; loopback, private and link-local addresses stay blocked unless listed as IPs."""
    approvals_folder: str | PathLike[str]
    """Folder of the lasting approvals a person gives at an 'ask' prompt ([d]ay: 24 h, [a]lways), each bound to the skill's code, in a private file per configuration (list and revoke them with `sandbox-kernel approvals`); '' to keep every answer to the session. Default: the kernel's folder in the Jupyter data dir."""
    audit_log: str | PathLike[str]
    """JSON-lines file that records every skill call and every cell's metrics ('' to disable)."""
    audit_log_backups: int
    """Rotated audit logs kept beside audit_log ('.1' the newest); the oldest beyond them is deleted."""
    audit_log_max_bytes: int
    """Size at which the audit log is rotated: it becomes audit_log + '.1' (the older ones '.2', ...) and a new file is started. 0: never rotated."""
    auto_load_packages: bool
    """Load Pyodide packages that a cell imports before it runs (as Pyodide's loadPackagesFromImports)."""
    ca_bundle: str | PathLike[str] | None
    """A PEM file of CA certificates that the sandbox's TLS connections (allow_net, %pip) trust besides Deno's built-in ones: a proxy's CA on a network that inspects TLS. None (default): the host's SSL_CERT_FILE, else its SSL_CERT_DIR, when set (the choice is logged)."""
    cell_timeout: float | None
    """Seconds a cell may run. On expiry the cell is interrupted; if it does not stop within interrupt_grace, the sandbox is restarted. A sandbox's start (and warm-up) is never counted. None (default): no limit."""
    early_start: bool
    """Spawn the first sandbox as the kernel process begins, before it imports ipykernel, when the settings on its command line and in sandbox_kernel_config files allow it and nothing needs downloading; it is used only if the kernel arrives at the same settings (otherwise it is killed, having run no code). The config files are then read twice: a sandbox_kernel_config.py that does more than set values does it twice."""
    interrupt_grace: float
    """Seconds an interrupted cell gets to stop before the sandbox is restarted."""
    load_skill_entry_points: bool
    """Also load skills that installed packages publish (entry-point group sandbox_kernel.skills)."""
    max_checkpoint_bytes: int
    """Largest session state %checkpoint may save (and %restore read back), in bytes."""
    max_checkpoints: int
    """Named checkpoints one kernel keeps (%checkpoint NAME; reusing a name replaces that one)."""
    max_frame_bytes: int
    """Largest message accepted from the sandbox, in bytes."""
    max_output_bytes: int
    """Output one cell may send to the frontend (every message, counted with 256 bytes for its envelope, and its reply's payload); the rest is dropped with a notice. Also the most one completion or inspection reply may carry: it is cut there, and says so."""
    memory_limit_mb: int
    """Memory for the sandbox, in MiB: WebAssembly memory (Python's objects) and the in-memory files (/tmp, /home/pyodide, installed packages) together; past it a file write fails with OSError(ENOSPC) and an allocation with MemoryError, each naming this setting. The JS heap has the same cap of its own. The Deno process takes up to ~128 MiB more (docs/security.md, One memory budget)."""
    mount_limits: dict[str, Any]
    """Per guest mount path: {'suffixes': ['.csv', ...] (narrows the data suffixes; the one way to let '.json' and '.txt' reach the host), 'max_file_bytes': N, 'max_total_bytes': N, 'max_growth_bytes': N (default 1 GiB, apparent sizes), 'host_writes': 'data' (default: only plain data files reach the host; the rest stays inside the sandbox) or 'any' (every file: the user's risk)}, checked by the supervisor on every write there (docs/security.md, 'Host folders are default-deny')."""
    mounts: list[str]
    """Host folders shown in the sandbox: 'host_folder:/guest/path[:ro|rw]' (default ro). Relative host folders are relative to the kernel's working directory. Only plain data files written to an rw folder reach the host; the rest stays inside the sandbox (mount_limits' host_writes)."""
    os_layers: list[Literal["namespaces", "landlock", "seccomp"]]
    """The OS layers os_sandbox applies: 'namespaces' (user, IPC, UTS and, without allow_net, network), 'landlock' (files, TCP ports, signals), 'seccomp' (dangerous system calls, new processes)."""
    os_sandbox: Literal["auto", "required", "off"]
    """OS confinement of the sandbox process behind Deno's permissions (Linux): 'auto' uses every layer available and logs which; 'required' refuses to start when one of os_layers is missing; 'off' uses none."""
    packages: list[str]
    """Packages every sandbox has from its start, e.g. ['six', 'attrs==23.2']: resolved on the host (pip, or SandboxKernel.wheelhouse), unpacked and compiled once into a cache folder that sandboxes mount read-only; pure-Python or Pyodide wheels only."""
    project_folder: str | PathLike[str]
    """A folder that holds the working folder, e.g. '..' (relative to the working folder): with working_folder 'ro' or 'rw', it is mounted read-only at /project and the working folder takes its own place inside it (a notebook in project/notebooks works in /project/notebooks), so that paths above the notebook's folder ('../data.csv', '%run ../tools.py') work. Never your home folder or /."""
    pyodide_index: str | PathLike[str]
    """Where Pyodide's compiled packages (numpy, ...) come from: an http(s) URL, a file:// URL or a local folder, each with its pyodide-lock.json (without one, Pyodide's own lock names the files). Default: the CDN of the pinned Pyodide version."""
    skill_approver: str | PathLike[str]
    """Import path of a callable(skill, method, args, kwargs) -> True/'once'/'session'/'day'/'always'/False for 'ask'."""
    skill_max_bytes: int
    """Largest skill arguments or result, in bytes of JSON."""
    skill_policy: dict[str, str]
    """Per 'Skill' or 'Skill.method': 'allow' (default), 'deny' or 'ask' (ask the person via stdin)."""
    skill_timeout: float
    """Seconds one skill call may take on the host."""
    skills: list[str]
    """Skills the guest may call, by name or import path: a shipped example ('TimeSkill', 'KeyValueSkill', 'SignerSkill'), 'package.module.Class' or 'package.module' (its ...Skill classes). None by default."""
    skills_path: str | PathLike[str] | None
    """A folder of skill files: every *.py in it, classes named ...Skill. Relative to the kernel's working folder; refused where guest code can write (inside an rw mount, or with working_folder='rw')."""
    spare_sandbox: Literal["auto", True, False]
    """Keep a second, pre-warmed sandbox so that a restart takes ~0.1 s instead of ~0.4 s, at the cost of a second Deno process (~130 MiB PSS). 'auto': from the start when cell_timeout is set (timeouts restart), otherwise from the first restart or checkpoint on (%checkpoint, the agent API's checkpoint()/fork(), the MCP tool; a restore is a restart); True/False: always/never."""
    start_timeout: float
    """Seconds the sandbox may take to start."""
    trust_output: bool
    """Send the guest's output unchanged, JavaScript and scripts in HTML included. Only for code you trust: JupyterLab runs such output with the rights of your Jupyter session."""
    use_snapshot: bool
    """Start sandboxes from a memory snapshot of Python with IPython loaded (built once, cached per version)."""
    wheelhouse: str | PathLike[str] | None
    """A local folder of wheels to resolve `packages` and `%pip install` from, on the host (offline); the sandbox gets copies of the wheels it asks for, never the folder."""
    widget_modules: list[str]
    """Widget modules (npm names, e.g. 'bqplot') whose models the sandbox may create in the browser, besides the @jupyter-widgets/base, controls and output that JupyterLab ships. Only for widget libraries you trust: their views get the widget state the sandbox wrote, unchecked (their models may be drawn only by views of these modules, never by a core view; see docs/widgets.md)."""
    working_folder: Literal["off", "ro", "rw"]
    """Mount the kernel's working folder (in JupyterLab: the notebook's folder) at /work, read-only ('ro') or read-write ('rw'), and make it the guest's working folder, so that open('data.csv') finds the file next to the notebook. 'off': the guest sees no host file unless `mounts` names it. Writes: with 'rw' only plain data files (.csv, .parquet, .png, ...) reach the folder; anything else, and every write with 'ro', stays inside the sandbox (docs/security.md, 'Host folders are default-deny'). Never your home folder or / (put the notebook in a project folder); secret folders in it (.ssh, .env, ...) stay hidden."""

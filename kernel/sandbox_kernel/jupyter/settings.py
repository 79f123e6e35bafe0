"""The kernel's settings: traitlets of `SandboxKernel` (config section `SandboxKernel`), and what they resolve to.

`SandboxSettings` declares every setting (its help is the reference: docs/configuration.md is made from it).
`resolve()` turns them, once per kernel, into what the kernel runs with (parsed mounts, the skills, the output
sanitizer's hosts) together with every problem found, in words that name the setting and the fix: while there
is any, no sandbox starts and every cell answers with SandboxSettingsError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traitlets import Bool, Dict, Enum, Float, Int, List, TraitError, Unicode, default, validate
from traitlets.config import LoggingConfigurable
from traitlets.utils.importstring import import_item

from sandbox_kernel import private_files
from sandbox_kernel.jupyter.setting_sources import Sources
from sandbox_kernel.jupyter.settings_check import own_settings
from sandbox_kernel.packages import index as packages
from sandbox_kernel.sandbox import host_places, mounts, netpolicy, tls_trust
from sandbox_kernel.sandbox.oslayers.spec import LAYERS, MODES
from sandbox_kernel.skills import audit
from sandbox_kernel.skills import loader as skill_loader
from sandbox_kernel.skills.audit import AuditLog
from sandbox_kernel.skills.calls import SkillService
from sandbox_kernel.skills.gatekeeper import Gatekeeper, check_policy
from sandbox_kernel.skills.grants import GrantStore

if TYPE_CHECKING:
    from sandbox_kernel.sandbox.launcher import LaunchSettings

WORKING_FOLDER = "/work"  # where working_folder puts the kernel's folder in the guest
PROJECT_FOLDER = "/project"  # where project_folder puts the folder above it
# Settings that name the host's files or code: kernel_info's "settings" says only whether each is set (a client of a
# gateway learns the limits it runs under, not the gateway machine's paths; mounts are reported by guest path).
HOST_DETAILS = frozenset(
    {
        "mounts",
        "audit_log",
        "ca_bundle",
        "wheelhouse",
        "pyodide_index",
        "skills_path",
        "skill_approver",
        "approvals_folder",
        "project_folder",
    }
)


class SandboxSettings(LoggingConfigurable):
    """Every setting of the kernel, as traitlets (given as `--SandboxKernel.name=value` or in config files)."""

    cell_timeout = Float(
        None,
        allow_none=True,
        help="Seconds a cell may run. On expiry the cell is interrupted; if it does not stop "
        "within interrupt_grace, the sandbox is restarted. A sandbox's start (and warm-up) is never counted. "
        "None (default): no limit.",
    ).tag(config=True)
    interrupt_grace = Float(3.0, help="Seconds an interrupted cell gets to stop before the sandbox is restarted.").tag(
        config=True
    )
    start_timeout = Float(120.0, help="Seconds the sandbox may take to start.").tag(config=True)
    max_frame_bytes = Int(64 << 20, help="Largest message accepted from the sandbox, in bytes.").tag(config=True)
    mounts = List(
        Unicode(),
        help="Host folders shown in the sandbox: 'host_folder:/guest/path[:ro|rw]' (default ro). "
        "Relative host folders are relative to the kernel's working directory. Only plain data files written to an "
        "rw folder reach the host; the rest stays inside the sandbox (mount_limits' host_writes).",
    ).tag(config=True)
    mount_limits = Dict(
        help="Per guest mount path: {'suffixes': ['.csv', ...] (narrows the data suffixes; the one way to let "
        "'.json' and '.txt' reach the host), 'max_file_bytes': N, 'max_total_bytes': N, "
        "'max_growth_bytes': N (default 1 GiB, apparent sizes), 'host_writes': 'data' (default: only plain data "
        "files reach the host; the rest stays inside the sandbox) or 'any' (every file: the user's risk)}, "
        "checked by the supervisor on every write there (docs/security.md, 'Host folders are default-deny')."
    ).tag(config=True)
    allow_net = List(
        Unicode(),
        help="Hosts the sandbox may connect to: 'host', 'host:port', 'IP' or 'IP:port'. None by default; "
        "loopback, private and link-local addresses stay blocked unless listed as IPs.",
    ).tag(config=True)
    ca_bundle = Unicode(
        None,
        allow_none=True,
        help="A PEM file of CA certificates that the sandbox's TLS connections (allow_net, %pip) trust besides "
        "Deno's built-in ones: a proxy's CA on a network that inspects TLS. None (default): the host's "
        "SSL_CERT_FILE, else its SSL_CERT_DIR, when set (the choice is logged).",
    ).tag(config=True)
    memory_limit_mb = Int(
        1024,
        help="Memory for the sandbox, in MiB: WebAssembly memory (Python's objects) and the in-memory files (/tmp, "
        "/home/pyodide, installed packages) together; past it a file write fails with OSError(ENOSPC) and an "
        "allocation with MemoryError, each naming this setting. The JS heap has the same cap of its own. The Deno "
        "process takes up to ~128 MiB more (docs/security.md, One memory budget).",
    ).tag(config=True)
    max_output_bytes = Int(
        10 << 20,
        help="Output one cell may send to the frontend (every message, counted with 256 bytes for its envelope, and "
        "its reply's payload); the rest is dropped with a notice. Also the most one completion or inspection reply "
        "may carry: it is cut there, and says so.",
    ).tag(config=True)
    trust_output = Bool(
        False,
        help="Send the guest's output unchanged, JavaScript and scripts in HTML included. Only for code you trust: "
        "JupyterLab runs such output with the rights of your Jupyter session.",
    ).tag(config=True)
    widget_modules = List(
        Unicode(),
        help="Widget modules (npm names, e.g. 'bqplot') whose models the sandbox may create in the browser, besides "
        "the @jupyter-widgets/base, controls and output that JupyterLab ships. Only for widget libraries you trust: "
        "their views get the widget state the sandbox wrote, unchecked (their models may be drawn only by views of "
        "these modules, never by a core view; see docs/widgets.md).",
    ).tag(config=True)
    packages = List(
        Unicode(),
        help="Packages every sandbox has from its start, e.g. ['six', 'attrs==23.2']: resolved on the host (pip, or "
        "SandboxKernel.wheelhouse), unpacked and compiled once into a cache folder that sandboxes mount read-only; "
        "pure-Python or Pyodide wheels only.",
    ).tag(config=True)
    wheelhouse = Unicode(
        None,
        allow_none=True,
        help="A local folder of wheels to resolve `packages` and `%pip install` from, on the host (offline); the "
        "sandbox gets copies of the wheels it asks for, never the folder.",
    ).tag(config=True)
    pyodide_index = Unicode(
        help="Where Pyodide's compiled packages (numpy, ...) come from: an http(s) URL, a file:// URL or a local "
        "folder, each with its pyodide-lock.json (without one, Pyodide's own lock names the files). "
        "Default: the CDN of the pinned Pyodide version."
    ).tag(config=True)
    spare_sandbox = Enum(
        ["auto", True, False],
        default_value="auto",
        help="Keep a second, pre-warmed sandbox so that a restart takes ~0.1 s instead of ~0.4 s, at the cost of a "
        "second Deno process (~130 MiB PSS). 'auto': from the start when cell_timeout is set (timeouts restart), "
        "otherwise from the first restart or checkpoint on (%checkpoint, the agent API's checkpoint()/fork(), the "
        "MCP tool; a restore is a restart); True/False: always/never.",
    ).tag(config=True)
    early_start = Bool(
        True,
        help="Spawn the first sandbox as the kernel process begins, before it imports ipykernel, when the settings on "
        "its command line and in sandbox_kernel_config files allow it and nothing needs downloading; it is used only "
        "if the kernel arrives at the same settings (otherwise it is killed, having run no code). The config files "
        "are then read twice: a sandbox_kernel_config.py that does more than set values does it twice.",
    ).tag(config=True)
    max_checkpoint_bytes = Int(
        512 << 20, help="Largest session state %checkpoint may save (and %restore read back), in bytes."
    ).tag(config=True)
    max_checkpoints = Int(
        20, help="Named checkpoints one kernel keeps (%checkpoint NAME; reusing a name replaces that one)."
    ).tag(config=True)
    use_snapshot = Bool(
        True,
        help="Start sandboxes from a memory snapshot of Python with IPython loaded (built once, cached per version).",
    ).tag(config=True)
    auto_load_packages = Bool(
        True, help="Load Pyodide packages that a cell imports before it runs (as Pyodide's loadPackagesFromImports)."
    ).tag(config=True)
    skills = List(
        Unicode(),
        help="Skills the guest may call, by name or import path: a shipped example ('TimeSkill', 'KeyValueSkill', "
        "'SignerSkill'), 'package.module.Class' or 'package.module' (its ...Skill classes). None by default.",
    ).tag(config=True)
    skills_path = Unicode(
        None,
        allow_none=True,
        help="A folder of skill files: every *.py in it, classes named ...Skill. Relative to the kernel's working "
        "folder; refused where guest code can write (inside an rw mount, or with working_folder='rw').",
    ).tag(config=True)
    load_skill_entry_points = Bool(
        False, help="Also load skills that installed packages publish (entry-point group sandbox_kernel.skills)."
    ).tag(config=True)
    skill_policy = Dict(
        value_trait=Unicode(),
        help="Per 'Skill' or 'Skill.method': 'allow' (default), 'deny' or 'ask' (ask the person via stdin).",
    ).tag(config=True)
    skill_approver = Unicode(
        "",
        help="Import path of a callable(skill, method, args, kwargs) -> True/'once'/'session'/'day'/'always'/False for 'ask'.",
    ).tag(config=True)
    approvals_folder = Unicode(
        help="Folder of the lasting approvals a person gives at an 'ask' prompt ([d]ay: 24 h, [a]lways), each bound "
        "to the skill's code, in a private file per configuration (list and revoke them with `sandbox-kernel "
        "approvals`); '' to keep every answer to the session. Default: the kernel's folder in the Jupyter data dir."
    ).tag(config=True)
    skill_timeout = Float(30.0, help="Seconds one skill call may take on the host.").tag(config=True)
    skill_max_bytes = Int(1 << 20, help="Largest skill arguments or result, in bytes of JSON.").tag(config=True)
    audit_log = Unicode(
        help="JSON-lines file that records every skill call and every cell's metrics ('' to disable)."
    ).tag(config=True)
    audit_log_max_bytes = Int(
        10 << 20,
        help="Size at which the audit log is rotated: it becomes audit_log + '.1' (the older ones '.2', ...) and a new "
        "file is started. 0: never rotated.",
    ).tag(config=True)
    audit_log_backups = Int(
        5, help="Rotated audit logs kept beside audit_log ('.1' the newest); the oldest beyond them is deleted."
    ).tag(config=True)
    working_folder = Enum(
        ("off", "ro", "rw"),
        "off",
        help="Mount the kernel's working folder (in JupyterLab: the notebook's folder) at /work, read-only ('ro') or "
        "read-write ('rw'), and make it the guest's working folder, so that open('data.csv') finds the file next "
        "to the notebook. 'off': the guest sees no host file unless `mounts` names it. Writes: with 'rw' only plain "
        "data files (.csv, .parquet, .png, ...) reach the folder; anything else, and every write with 'ro', "
        "stays inside the sandbox (docs/security.md, 'Host folders are default-deny'). Never your home folder or / "
        "(put the notebook in a project folder); secret folders in it (.ssh, .env, ...) stay hidden.",
    ).tag(config=True)
    project_folder = Unicode(
        "",
        help="A folder that holds the working folder, e.g. '..' (relative to the working folder): with "
        "working_folder 'ro' or 'rw', it is mounted read-only at /project and the working folder takes its own "
        "place inside it (a notebook in project/notebooks works in /project/notebooks), so that paths above the "
        "notebook's folder ('../data.csv', '%run ../tools.py') work. Never your home folder or /.",
    ).tag(config=True)
    os_sandbox = Enum(
        MODES,
        "auto",
        help="OS confinement of the sandbox process behind Deno's permissions (Linux): 'auto' uses every layer "
        "available and logs which; 'required' refuses to start when one of os_layers is missing; 'off' uses none.",
    ).tag(config=True)
    os_layers = List(
        Enum(LAYERS),
        list(LAYERS),
        help="The OS layers os_sandbox applies: 'namespaces' (user, IPC, UTS and, without allow_net, network), "
        "'landlock' (files, TCP ports, signals), 'seccomp' (dangerous system calls, new processes).",
    ).tag(config=True)

    @default("pyodide_index")
    def _default_pyodide_index(self) -> str:
        return packages.default_pyodide_index()

    @default("audit_log")
    def _default_audit_log(self) -> str:
        return str(audit.default_path())

    @default("approvals_folder")
    def _default_approvals_folder(self) -> str:
        return str(private_files.kernel_data_folder())

    @validate("audit_log_max_bytes", "audit_log_backups")
    def _not_negative(self, proposal: Any) -> Any:
        value = proposal["value"]
        if value < 0:
            raise TraitError(f"SandboxKernel.{proposal['trait'].name} must be 0 or more, got {value!r}")
        return value

    @validate("cell_timeout", "interrupt_grace", "start_timeout", "skill_timeout")
    def _positive_seconds(self, proposal: Any) -> Any:
        value = proposal["value"]
        if value is not None and value <= 0:
            name = proposal["trait"].name
            raise TraitError(f"SandboxKernel.{name} must be a positive number of seconds, got {value!r}")
        return value


@dataclass
class Resolved:
    """What the settings resolve to, and every problem with them (empty: the kernel may start sandboxes)."""

    mounts: list[mounts.Mount]
    skills: SkillService
    image_hosts: list[str]  # allow_net's hosts: output may load images from them
    problems: list[str] = field(default_factory=list)
    ca: tls_trust.CaTrust = field(default_factory=lambda: tls_trust.CaTrust(None, ""))  # what TLS trusts
    ca_note: str = ""  # for the kernel's log and kernel_info: what the sandbox's TLS trusts, and from where
    ca_warnings: list[str] = field(default_factory=list)  # the host's variables that could not be used
    working_folder: str | None = None  # the guest's working folder (a mount), None: its own home

    @property
    def error(self) -> str:
        """The whole message a user sees while the settings are wrong ('' when they are fine)."""
        if not self.problems:
            return ""
        listed = "\n".join(f"- {problem}" for problem in self.problems)
        return (
            "the kernel's settings are wrong, so no code runs until they are fixed and the kernel is restarted:\n"
            f"{listed}"
        )


def resolve(settings: SandboxSettings, cwd: Path, config_files: list[str], with_skills: bool = True) -> Resolved:
    """Check and resolve the settings once; nothing from a folder the guest may write is loaded. Without
    `with_skills` no skill is imported (and their problems are not found): what the early start needs."""
    problems: list[str] = []
    found: list[mounts.Mount] = []
    guest_cwd, project, problem = working_place(settings, cwd)
    if problem:
        problems.append(problem)
    try:
        specs = mount_specs(settings, cwd, guest_cwd, project)
        nested = (PROJECT_FOLDER, guest_cwd) if project is not None and guest_cwd is not None else None
        found = mounts.parse_all(specs, cwd, dict(settings.mount_limits), nested)
    except mounts.MountError as exc:
        problems.append(f"{mount_error_setting(settings, str(exc))}: {exc}")
    # Before any skill is imported: nothing the kernel loads may lie where guest code can write.
    problems += host_place_problems(settings, found, cwd, config_files)
    try:
        skills = load_skills(settings) if with_skills and not problems else no_skills(settings)
    except TraitError as exc:
        problems.append(str(exc))
        skills = no_skills(settings)
    allowed: list[str] = []
    try:
        allowed, _ = netpolicy.deno_flags(list(settings.allow_net))
        problems += [f"SandboxKernel.allow_net: {p}" for p in netpolicy.private_resolutions(allowed)]
    except netpolicy.NetPolicyError as exc:
        problems.append(f"SandboxKernel.allow_net: {exc}")
    image_hosts = [netpolicy.split_entry(entry)[0] for entry in allowed]
    ca, warnings = tls_trust.CaTrust(None, ""), list[str]()
    try:
        if settings.ca_bundle or settings.allow_net:  # the host's variables matter only with a network
            ca, warnings = tls_trust.resolve(settings.ca_bundle, os.environ)
    except tls_trust.CaBundleError as exc:
        problems.append(str(exc))
    note = ca.describe() if settings.allow_net else ""
    return Resolved(
        found, skills, image_hosts, problems, ca=ca, ca_note=note, ca_warnings=warnings, working_folder=guest_cwd
    )


def working_place(settings: SandboxSettings, cwd: Path) -> tuple[str | None, Path | None, str | None]:
    """The guest's working folder (None: its own home), the project folder to mount read-only at PROJECT_FOLDER
    (None: none), and the problem with project_folder, if any."""
    if settings.working_folder == "off":
        if settings.project_folder:
            return None, None, "SandboxKernel.project_folder needs working_folder 'ro' or 'rw' (it holds that folder)"
        return None, None, None
    if not settings.project_folder:
        return WORKING_FOLDER, None, None
    project = (cwd / Path(settings.project_folder).expanduser()).resolve()
    here = cwd.resolve()
    if project == here or not here.is_relative_to(project):
        return (
            WORKING_FOLDER,
            None,
            (
                f"SandboxKernel.project_folder {settings.project_folder!r} is {str(project)!r}, which does not hold the "
                f"working folder {str(here)!r}: name a folder above it, e.g. '..'"
            ),
        )
    way_down = here.relative_to(project).as_posix()
    if ":" in way_down:
        return (
            WORKING_FOLDER,
            None,
            (
                f"SandboxKernel.project_folder: the way down to the working folder ({way_down!r}) has a ':', which a "
                "mount cannot name; move the notebook, or mount the folders with SandboxKernel.mounts"
            ),
        )
    if host_places.working_folder_problem(project):
        return (
            WORKING_FOLDER,
            None,
            (
                f"SandboxKernel.project_folder {settings.project_folder!r} is {str(project)!r}, your home folder or the "
                "root folder, which hold your keys and tool configuration: name the project's own folder (below your "
                "home), or mount the folders the notebook needs with SandboxKernel.mounts"
            ),
        )
    return f"{PROJECT_FOLDER}/{way_down}", project, None


def mount_error_setting(settings: SandboxSettings, message: str) -> str:
    """The setting a MountError's `message` is about: `mounts` when it names one of its entries, else every
    setting that makes mounts."""
    for spec in settings.mounts:
        split = mounts.split_spec(spec)
        guest = split[1] if split else None
        if message.startswith(f"mount {spec!r}:") or (guest and message.startswith(f"mount {guest}:")):
            return "SandboxKernel.mounts"
    return "SandboxKernel.mounts, mount_limits, working_folder or project_folder"


def mount_specs(
    settings: SandboxSettings, cwd: Path, guest_cwd: str | None = WORKING_FOLDER, project: Path | None = None
) -> list[str]:
    """`mounts`, the project folder read-only at PROJECT_FOLDER (`project_folder`), and the kernel's working
    folder at `guest_cwd` when `working_folder` asks for it."""
    specs = list(settings.mounts)
    if project is not None:
        specs.append(f"{project}:{PROJECT_FOLDER}:ro")
    if settings.working_folder != "off" and guest_cwd is not None:
        specs.append(f"{cwd}:{guest_cwd}:{settings.working_folder}")
    return specs


def load_skills(settings: SandboxSettings) -> SkillService:
    """The configured skills behind their gatekeeper; a TraitError names what is wrong."""
    try:
        found = skill_loader.load_configured(list(settings.skills))
        if settings.skills_path:
            found += skill_loader.load_directory(Path(settings.skills_path))
        if settings.load_skill_entry_points:
            found += skill_loader.load_entry_points()
        by_name = skill_loader.by_name(found)
    except skill_loader.SkillLoadError as exc:
        raise TraitError(str(exc)) from None
    problems = check_policy(settings.skill_policy, by_name)
    if problems:
        raise TraitError("SandboxKernel.skill_policy: " + "; ".join(problems))
    try:
        approver = import_item(settings.skill_approver) if settings.skill_approver else None
    except (ImportError, ValueError) as exc:
        raise TraitError(
            f"SandboxKernel.skill_approver {settings.skill_approver!r} cannot be imported: {exc}"
        ) from None
    return SkillService(
        Gatekeeper(by_name, dict(settings.skill_policy)),
        AuditLog(
            Path(settings.audit_log) if settings.audit_log else None,
            settings.audit_log_max_bytes,
            settings.audit_log_backups,
        ),
        settings.skill_timeout,
        settings.skill_max_bytes,
        approver,
        grant_store(settings),
    )


def grant_store(settings: SandboxSettings) -> GrantStore | None:
    """The lasting approvals of this configuration (the code that may be loaded), or None if they are off."""
    if not settings.approvals_folder:
        return None
    path = str(Path(settings.skills_path).resolve()) if settings.skills_path else None
    configuration = json.dumps({"skills": list(settings.skills), "skills_path": path,
                                "entry_points": settings.load_skill_entry_points}, sort_keys=True)  # fmt: skip
    return GrantStore.of(configuration, Path(settings.approvals_folder))


def no_skills(settings: SandboxSettings) -> SkillService:
    """No skill at all (while the settings are wrong)."""
    return SkillService(Gatekeeper({}, {}), AuditLog(None), settings.skill_timeout, settings.skill_max_bytes, None)


def host_place_problems(
    settings: SandboxSettings, found: list[mounts.Mount], cwd: Path, config_files: list[str]
) -> list[str]:
    """Mounts that would show guest code the kernel's secrets or let it change what the host runs."""
    problems = []
    if settings.working_folder != "off":
        problem = host_places.working_folder_problem(cwd)
        if problem:
            problems.append(f"SandboxKernel.working_folder: {problem}")
    extra = [host_places.Place(Path(p).resolve(), "a configuration file the kernel loaded") for p in config_files]
    for name, value in (("skills_path", settings.skills_path), ("wheelhouse", settings.wheelhouse)):
        if value:
            extra.append(host_places.Place(Path(value).resolve(), f"SandboxKernel.{name}"))
    local_index = host_places.local_folder(settings.pyodide_index)
    if local_index is not None:
        extra.append(host_places.Place(local_index, "SandboxKernel.pyodide_index"))
    if settings.audit_log:
        extra.append(host_places.Place(Path(settings.audit_log).resolve(), "the audit log", secret=True))
    if settings.approvals_folder:  # the guest may neither read the grants nor write one
        extra.append(host_places.Place(Path(settings.approvals_folder).resolve(), "the lasting approvals", secret=True))
    places = host_places.kernel_places(extra)
    problems += [f"SandboxKernel.mounts or working_folder: {p}" for p in host_places.mount_problems(found, places)]
    return problems


def launch_settings(settings: SandboxSettings, resolved: Resolved, error: Callable[[], str]) -> LaunchSettings:
    """What the kernel's sandboxes are launched with (the early start makes the same from the same settings);
    `error`: the settings' problems, while a sandbox may not start."""
    from sandbox_kernel.sandbox.launcher import LaunchSettings  # the launcher's modules only where sandboxes start
    from sandbox_kernel.sandbox.startup import SandboxOptions

    options = SandboxOptions(
        Path(), Path(),  # provisioned per launch
        start_timeout=settings.start_timeout,
        max_frame_bytes=settings.max_frame_bytes,
        max_event_bytes=max_event_bytes(settings),
        reply_bytes=2 * settings.skill_max_bytes + (64 << 10),
        use_snapshot=settings.use_snapshot,
        mounts=resolved.mounts,
        allow_net=list(settings.allow_net),
        ca_pem=resolved.ca.pem,
        ca_store=resolved.ca.store,
        memory_limit_mb=settings.memory_limit_mb,
        os_sandbox=settings.os_sandbox,
        os_layers=list(settings.os_layers),
    )  # fmt: skip
    return LaunchSettings(options, settings.pyodide_index, list(settings.packages), settings.wheelhouse, error)


def request_bytes(settings: SandboxSettings) -> int:
    """The largest request the guest's glue makes (a skill call with its arguments)."""
    return int(settings.skill_max_bytes) + (64 << 10)


def max_event_bytes(settings: SandboxSettings) -> int:
    """The largest event the sandbox may send: a cell's output, or a request."""
    return max(settings.max_output_bytes, request_bytes(settings)) + (64 << 10)


def guest_config(settings: SandboxSettings, resolved: Resolved, sources: Sources | None = None) -> dict[str, Any]:
    """What the guest needs to know to explain its limits (no host paths, no secrets); `sources`: how the user
    of the program that started the kernel writes its settings (setting_sources.py)."""
    sources = sources or Sources()
    return {
        "setting_names": {"names": sources.names, "other": sources.other},
        "skills": skill_loader.catalog(resolved.skills.gatekeeper.skills),
        "max_bytes": settings.skill_max_bytes,
        "mounts": mounts.guest_config(resolved.mounts),
        "allow_net": list(settings.allow_net),
        "memory_limit_mb": settings.memory_limit_mb,
        "auto_load_packages": settings.auto_load_packages,
        "wheelhouse": bool(settings.wheelhouse),  # whether %pip may ask for its wheels (not where it is)
        "cwd": resolved.working_folder,
    }


def reported(settings: SandboxSettings) -> dict[str, Any]:
    """Every setting with the value the kernel runs with, for kernel_info; those in HOST_DETAILS only as whether
    they are set."""
    values = {name: getattr(settings, name) for name in sorted(own_settings(type(settings)))}
    return {name: bool(value) if name in HOST_DETAILS else value for name, value in values.items()}

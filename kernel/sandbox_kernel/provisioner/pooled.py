"""PooledKernelProvisioner: jupyter_client's local provisioner, with kernels started ahead of need.

The kernelspec names it (`metadata.kernel_provisioner`), so JupyterLab, Notebook, nbclient, `jupyter execute` and
the agent API use it unchanged. A launch takes a waiting kernel of the same command, environment and options (it
has spawned its sandbox and imported the kernel already) and hands it the launch's connection file, working folder
and per-launch variables; with none waiting it starts the kernel as LocalProvisioner does, and says why in the log.
Either way the pool then refills (waiting_kernels.py). Each waiting kernel is handed out once, and has run nothing.
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
from pathlib import Path
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.launcher import launch_kernel
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from traitlets import Float, Int, default

from sandbox_kernel.provisioner.handover import PER_LAUNCH_ENV, Handover
from sandbox_kernel.provisioner.waiting_kernels import EMPTY, POOL, LaunchKey, WaitingKernel

# For kernel managers in programs that keep no pool of waiting kernels: the agent API (AsyncSandboxPool is its pool)
# and Enterprise Gateway's launcher (one kernel per launcher process). A traitlets config of the kernel manager.
NO_POOL = {"PooledKernelProvisioner": {"pool_size": 0}}
POOL_SIZE_VARIABLE = "SANDBOX_KERNEL_POOL_SIZE"  # pool_size's default, where no config reaches (a test run, a job)


class PooledKernelProvisioner(LocalProvisioner):
    """Launches kernels from a pool of kernel processes started ahead of need."""

    pool_size = Int(
        help="Kernels kept started and waiting, for the next launch (a new notebook, a restart, a batch run's next "
        f"notebook) to take at once; each waiting kernel costs ~155 MiB PSS. 0: every kernel starts cold. Default 1, "
        f"or the environment variable {POOL_SIZE_VARIABLE}.",
    ).tag(config=True)
    refill_delay = Float(
        1.0,
        help="Seconds after a launch before the pool starts its replacement, so that the kernel just launched has "
        "its first seconds to itself.",
    ).tag(config=True)
    idle_timeout = Float(
        1800.0,
        help="Seconds without a launch after which the waiting kernels are stopped (the next launch starts cold and "
        "the pool fills again). 0: never.",
    ).tag(config=True)

    @default("pool_size")
    def _default_pool_size(self) -> int:
        given = os.environ.get(POOL_SIZE_VARIABLE, "1")
        try:
            return max(int(given), 0)
        except ValueError:
            self.log.warning("%s=%r is not a number of kernels: the pool keeps 1", POOL_SIZE_VARIABLE, given)
            return 1

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Take a waiting kernel for this launch, or start one as LocalProvisioner does; then refill the pool."""
        options = self._scrub_kwargs(kwargs)
        connection_file = str(getattr(self.parent, "connection_file", ""))
        env: dict[str, str] = dict(options.get("env") or os.environ)
        if self.pool_size <= 0 or not connection_file or cmd.count(connection_file) != 1:
            return await super().launch_kernel(cmd, **kwargs)  # (the pool's waiting kernels stay for other launches)
        key = LaunchKey.of(cmd, env, options, connection_file)
        cwd, kernel, why_not = _take(key, options.get("cwd"))
        start = functools.partial(_start_waiting, list(key.cmd), env, options, cwd)
        if kernel is not None:
            ready = kernel.ready()
            try:
                kernel.hand_over(_handover(connection_file, cwd, env))
            except OSError as exc:  # it died since take() saw it alive
                await asyncio.to_thread(kernel.stop)
                kernel, why_not = None, f"the waiting kernel was gone ({exc})"
        if kernel is None:
            (self.log.debug if why_not == EMPTY else self.log.info)(
                "Kernel %s started cold: %s.", self.kernel_id, why_not
            )
            info = await super().launch_kernel(cmd, **kwargs)
        else:
            self.process = kernel.process
            self.pid = kernel.process.pid
            self.pgid = _process_group(kernel.process.pid)
            self.cwd = cwd
            self.log.info(
                "Kernel %s taken from the pool (started %.1f s before, %s).",
                self.kernel_id,
                kernel.waited(),
                "ready" if ready else "still starting",
            )
            info = self.connection_info
        POOL.launched(key, start, self.pool_size, self.refill_delay, self.idle_timeout)
        return info


def _process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # it has ended already: the kernel manager finds out as for any kernel
        return None


def _handover(connection_file: str, cwd: str, env: dict[str, str]) -> Handover:
    """The launch's connection file (absolute: the kernel moves to `cwd` first), folder and per-launch variables."""
    return Handover(os.path.abspath(connection_file), cwd, {k: env[k] for k in PER_LAUNCH_ENV if k in env})


def _take(key: LaunchKey, cwd: str | None) -> tuple[str, WaitingKernel | None, str]:
    """The launch's folder (absolute), and the kernel waiting for `key` or why there is none."""
    folder = str(Path(cwd or os.getcwd()).absolute())
    if not (os.path.isdir(folder) and os.access(folder, os.X_OK)):
        return folder, None, f"its folder {folder} is not a folder it can enter"  # a cold start says what is wrong
    return folder, *POOL.take(key)


def _start_waiting(
    cmd: list[str], env: dict[str, str], options: dict[str, Any], cwd: str, stdin: int
) -> subprocess.Popen[bytes]:
    """Start a kernel that waits for a handover: the launch's command, environment and options; `stdin` its end
    of the pool's socket pair."""
    kept = {k: v for k, v in options.items() if k not in ("cwd", "env", "stdin")}
    waiting_env = {k: v for k, v in env.items() if k not in PER_LAUNCH_ENV}
    process: subprocess.Popen[bytes] = launch_kernel(cmd, stdin=stdin, env=waiting_env, cwd=cwd, **kept)
    return process

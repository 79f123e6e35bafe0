"""Why an OS layer could not be applied, in words: the call that failed, its errno, the likely cause, and the
setting that would allow it (for the launcher's report, and so for the log, `doctor` and kernel_info).

Standard library only (it runs in the launcher). The causes are read from this process and the system: a seccomp
filter already on this process (a container runtime's profile), the sysctls that switch user namespaces off, a
container's marker files. In a Kubernetes pod the fix is a field of the pod's securityContext, not a runtime option.
"""

from __future__ import annotations

import errno
import os

CONTAINER_DOC = "docs/container.md"
# What the launcher calls, by layer: a container's seccomp profile must allow these (`sandbox-kernel seccomp-profile`).
NEEDED_SYSCALLS = {
    "namespaces": ("unshare", "mount", "umount2", "pivot_root"),
    "landlock": ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"),
    "seccomp": ("prctl", "seccomp"),
}
PROFILE_HINT = "`sandbox-kernel seccomp-profile BASE.json` makes one from the runtime's default: " + CONTAINER_DOC
EG_DOC = "docs/enterprise-gateway.md"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def seccomp_filtered() -> bool:
    """Whether a seccomp filter already confines this process (as a container runtime's profile does)."""
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("Seccomp:"):
            return line.split(":", 1)[1].strip() == "2"
    return False


def kubernetes() -> bool:
    """Whether this process seems to run in a Kubernetes pod: the kubelet's variables for the API server (set in
    every pod, enableServiceLinks or not; the launcher's own environment is scrubbed, so also) a mount the kubelet
    made from its pods folder (/etc/hosts, /dev/termination-log), whatever the cgroup version shows."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    return "/kubelet/pods/" in (_read("/proc/self/mountinfo") or "")


def container() -> str:
    """' in a Kubernetes pod' or ' in a container' when this process seems to run in one ('' otherwise), for the
    words of a cause."""
    if kubernetes():
        return " in a Kubernetes pod"
    if os.path.exists("/run/.containerenv") or os.path.exists("/.dockerenv") or os.environ.get("container"):
        return " in a container"
    cgroups = _read("/proc/1/cgroup") or ""
    if any(mark in cgroups for mark in ("docker", "kubepods", "containerd", "libpod", "crio")):
        return " in a container"
    return ""


def failed(call: str, code: int) -> str:
    """'unshare(CLONE_NEWUSER) failed with EPERM (Operation not permitted)'."""
    name = errno.errorcode.get(code, f"errno {code}")
    return f"{call} failed with {name} ({os.strerror(code)})"


def _by_filter(layer: str, note: str = "") -> str:
    where = container() or " (a container runtime's default profile, or a sandbox this kernel runs in)"
    calls = ", ".join(NEEDED_SYSCALLS[layer])
    profile = f"a seccomp profile that allows {calls}{note} ({PROFILE_HINT})"
    if kubernetes():
        profile = (
            f"securityContext.seccompProfile: {{type: Localhost, localhostProfile: <file>}} in the pod, naming {profile} "
            f"on each node under the kubelet's seccomp folder ({EG_DOC})"
        )
    return f"a seccomp filter on this process{where} refuses it; fix: {profile}"


def _on_host(setting: str) -> str:
    """`setting` made where it applies: on the host, or on the node of a pod."""
    return f"{setting} on the {'node' if kubernetes() else 'host'}"


def user_namespace(code: int) -> str:
    """Why unshare(CLONE_NEWUSER | ...) failed with `code`, and what would allow it."""
    what = failed("unshare(CLONE_NEWUSER)", code)
    limit = _read("/proc/sys/user/max_user_namespaces")
    if code == errno.ENOSPC or limit == "0":
        return (
            f"{what}: user namespaces are switched off or used up (user.max_user_namespaces={limit}); fix: "
            + _on_host("set the sysctl user.max_user_namespaces above 0")
        )
    if code == errno.EINVAL:
        return f"{what}: this Linux kernel has no user namespaces (built without CONFIG_USER_NS)"
    if code in (errno.EPERM, errno.ENOSYS) and seccomp_filtered():
        return f"{what}: {_by_filter('namespaces')}"
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return (
            f"{what}: unprivileged user namespaces are switched off (kernel.unprivileged_userns_clone=0); fix: "
            + _on_host("set that sysctl to 1")
        )
    return f"{what}: user namespaces are refused here (a security module's policy, or a chroot)"


def private_root(exc: OSError) -> str:
    """Why the private root (mounts inside the new user namespace) could not be built, and what would allow it."""
    code = exc.errno or 0
    name = f", {errno.errorcode.get(code, code)}" if code else ""
    what = f"the private root could not be built ({exc.strerror or exc}{name})"
    if code in (errno.EPERM, errno.ENOSYS) and seccomp_filtered():
        return f"{what}: {_by_filter('namespaces')}"
    if code in (errno.EACCES, errno.EPERM):
        if _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
            profile = (
                "securityContext.appArmorProfile: {type: Localhost, localhostProfile: <name>} in the pod, naming a "
                f"profile loaded on the node that allows `userns,` and `mount,` ({EG_DOC})"
                if kubernetes()
                else "an AppArmor profile for the kernel's Python that allows `userns,`"
            )
            return (
                f"{what}: AppArmor denies capabilities in new user namespaces "
                f"(kernel.apparmor_restrict_unprivileged_userns=1); fix: {profile}, or "
                + _on_host("that sysctl set to 0")
            )
        if kubernetes():
            return (
                f"{what}: a security module refuses mounts in a Kubernetes pod (the container runtime's default "
                "AppArmor profile denies every mount); fix: securityContext.appArmorProfile: {type: Unconfined} in "
                f"the pod (Kubernetes 1.30+), or Localhost naming a profile that allows mount ({EG_DOC})"
            )
        return (
            f"{what}: a security module refuses mounts{container()} (Docker's AppArmor profile docker-default "
            "denies every mount); fix: run the container with --security-opt apparmor=unconfined, or with an AppArmor "
            "profile that allows mount"
        )
    return what


def landlock(code: int) -> str:
    """Why landlock_create_ruleset failed with `code`, and what would allow it."""
    what = failed("landlock_create_ruleset", code)
    if code in (errno.EPERM, errno.ENOSYS) and seccomp_filtered():
        return f"{what}: {_by_filter('landlock', ', as current Docker, Podman and containerd defaults do')}"
    if code == errno.EOPNOTSUPP:
        return f"{what}: Landlock is built into this Linux kernel but not enabled; fix: add landlock to its lsm= list"
    return f"{what}: this Linux kernel has no Landlock (needs 5.13+ built with CONFIG_SECURITY_LANDLOCK)"

"""The container seccomp profile (`sandbox-kernel seccomp-profile`) and the launcher's words for a missing layer."""

from __future__ import annotations

import errno
import json

import pytest

from sandbox_kernel.cli.main import main
from sandbox_kernel.sandbox.oslayers import diagnose
from sandbox_kernel.sandbox.oslayers.seccomp_profile import allows_layers, needed, with_layers

# The shape of Docker's default profile (a few of its rules): an allow-list whose unshare and mount calls are allowed
# only with CAP_SYS_ADMIN, and no Landlock calls (as before runtimes learned them).
DOCKER_LIKE = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 1,
    "syscalls": [
        {"names": ["read", "write", "prctl", "seccomp", "clone"], "action": "SCMP_ACT_ALLOW"},
        {
            "names": ["unshare", "mount", "umount2", "pivot_root", "setns"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"caps": ["CAP_SYS_ADMIN"]},
        },
        {"name": "unshare", "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
    ],
}


def test_the_launchers_calls_are_what_a_profile_must_allow():
    landlock = ["landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"]
    assert needed() == sorted(["unshare", "mount", "umount2", "pivot_root", *landlock, "prctl", "seccomp"])


def test_a_docker_like_profile_refuses_the_layers_and_the_made_one_allows_them_and_keeps_the_rest():
    assert allows_layers(DOCKER_LIKE) == sorted(set(needed()) - {"prctl", "seccomp"})
    made = with_layers(DOCKER_LIKE)
    assert allows_layers(made) == []
    assert made["defaultAction"] == "SCMP_ACT_ERRNO" and made["defaultErrnoRet"] == 1
    # setns keeps its condition; no rule of the base names a needed call any more (none can refuse it)
    assert {"names": ["setns"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}} in made["syscalls"]
    assert {"names": ["read", "write", "clone"], "action": "SCMP_ACT_ALLOW"} in made["syscalls"]
    for rule in made["syscalls"][:-1]:
        assert not set(rule["names"]) & set(needed())
    assert made["syscalls"][-1]["names"] == needed() and made["syscalls"][-1]["action"] == "SCMP_ACT_ALLOW"
    assert DOCKER_LIKE["syscalls"][1]["names"][0] == "unshare"  # the base itself is not changed


@pytest.mark.parametrize("bad", [[], {"syscalls": []}, {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": {}}])
def test_what_is_not_a_profile_is_refused(bad):
    with pytest.raises(ValueError, match="not a seccomp profile"):
        with_layers(bad)


def test_the_command_writes_the_profile_and_says_what_was_wrong(tmp_path, capsys):
    base, out = tmp_path / "base.json", tmp_path / "out.json"
    base.write_text(json.dumps(DOCKER_LIKE))
    with pytest.raises(SystemExit) as done:
        main(["seccomp-profile", str(base), "-o", str(out)])
    assert done.value.code == 0
    assert allows_layers(json.loads(out.read_text())) == []
    base.write_text("[1]")
    with pytest.raises(SystemExit) as done:
        main(["seccomp-profile", str(base)])
    assert done.value.code == 2
    assert f"seccomp-profile: {base}: not a seccomp profile" in capsys.readouterr().err


@pytest.fixture
def system(monkeypatch):
    """A made-up system: its sysctls and whether a seccomp filter is on this process."""
    files: dict[str, str] = {}
    state = {"filtered": False, "container": ""}
    monkeypatch.setattr(diagnose, "_read", files.get)
    monkeypatch.setattr(diagnose, "seccomp_filtered", lambda: state["filtered"])
    monkeypatch.setattr(diagnose, "container", lambda: state["container"])
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # a host, unless a test makes it a pod
    return files, state


def test_user_namespaces_refused_by_a_containers_seccomp_profile(system):
    _, state = system
    state.update(filtered=True, container=" in a container")
    text = diagnose.user_namespace(errno.EPERM)
    assert text.startswith("unshare(CLONE_NEWUSER) failed with EPERM (Operation not permitted): ")
    assert "a seccomp filter on this process in a container refuses it" in text
    assert "a seccomp profile that allows unshare, mount, umount2, pivot_root" in text
    assert "`sandbox-kernel seccomp-profile BASE.json`" in text and "docs/container.md" in text


def test_user_namespaces_switched_off_by_sysctls(system):
    files, _ = system
    files["/proc/sys/user/max_user_namespaces"] = "0"
    assert "user.max_user_namespaces=0" in diagnose.user_namespace(errno.ENOSPC)
    files["/proc/sys/user/max_user_namespaces"] = "100"
    files["/proc/sys/kernel/unprivileged_userns_clone"] = "0"
    assert "kernel.unprivileged_userns_clone=0" in diagnose.user_namespace(errno.EPERM)
    assert "CONFIG_USER_NS" in diagnose.user_namespace(errno.EINVAL)


def test_a_private_root_refused_names_the_step_and_the_security_module(system):
    files, state = system
    refused = OSError(errno.EACCES, "make mounts private: Permission denied")
    text = diagnose.private_root(refused)
    assert text.startswith("the private root could not be built (make mounts private: Permission denied, EACCES)")
    assert "apparmor=unconfined" in text
    files["/proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = "1"
    assert "kernel.apparmor_restrict_unprivileged_userns=1" in diagnose.private_root(refused)
    state["filtered"] = True
    assert "allows unshare, mount, umount2, pivot_root" in diagnose.private_root(OSError(errno.EPERM, "x: y"))


def test_landlock_missing_by_filter_by_kernel_or_by_boot_setting(system):
    _, state = system
    assert "this Linux kernel has no Landlock" in diagnose.landlock(errno.ENOSYS)
    assert "add landlock to its lsm= list" in diagnose.landlock(errno.EOPNOTSUPP)
    state["filtered"] = True
    text = diagnose.landlock(errno.ENOSYS)
    assert text.startswith("landlock_create_ruleset failed with ENOSYS (Function not implemented): a seccomp filter")
    assert "allows landlock_create_ruleset, landlock_add_rule, landlock_restrict_self" in text


KUBELET_MOUNT = (  # a line of /proc/self/mountinfo in a pod on a cgroup v2 node, where /proc/1/cgroup says only 0::/
    "1510 1495 259:1 /var/lib/kubelet/pods/3f6c2a8e-7a1b-4c55-9d0e-0f1c2b3a4d5e/etc-hosts /etc/hosts rw,relatime - ext4 "
    "/dev/nvme0n1p1 rw\n"
)


def test_a_kubernetes_pod_is_recognised_by_the_kubelets_variable_or_mounts_not_its_cgroup(monkeypatch):
    files = {"/proc/1/cgroup": "0::/\n"}
    monkeypatch.setattr(diagnose, "_read", files.get)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("container", raising=False)
    monkeypatch.setattr(diagnose.os.path, "exists", lambda path: False)  # no /.dockerenv, no /run/.containerenv
    assert not diagnose.kubernetes() and diagnose.container() == ""
    files["/proc/self/mountinfo"] = KUBELET_MOUNT
    assert diagnose.kubernetes() and diagnose.container() == " in a Kubernetes pod"
    del files["/proc/self/mountinfo"]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert diagnose.container() == " in a Kubernetes pod"


def test_in_a_pod_each_fix_is_a_field_of_the_pods_security_context_or_the_nodes_setting(system, monkeypatch):
    files, state = system
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    state.update(filtered=True, container=" in a Kubernetes pod")
    text = diagnose.user_namespace(errno.EPERM)
    assert "a seccomp filter on this process in a Kubernetes pod refuses it; fix: securityContext.seccompProfile: " \
        "{type: Localhost, localhostProfile: <file>} in the pod, naming a seccomp profile that allows unshare, " \
        "mount, umount2, pivot_root" in text, text  # fmt: skip
    assert "the kubelet's seccomp folder (docs/enterprise-gateway.md)" in text and "--security-opt" not in text
    assert "securityContext.seccompProfile" in diagnose.landlock(errno.ENOSYS)
    state["filtered"] = False
    refused = OSError(errno.EACCES, "make mounts private: Permission denied")
    text = diagnose.private_root(refused)
    assert "fix: securityContext.appArmorProfile: {type: Unconfined} in the pod (Kubernetes 1.30+)" in text, text
    assert "apparmor=unconfined" not in text
    files["/proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = "1"
    text = diagnose.private_root(refused)
    assert "appArmorProfile: {type: Localhost, localhostProfile: <name>}" in text and text.endswith(
        "or that sysctl set to 0 on the node"
    ), text
    files["/proc/sys/user/max_user_namespaces"] = "0"
    assert diagnose.user_namespace(errno.ENOSPC).endswith("set the sysctl user.max_user_namespaces above 0 on the node")

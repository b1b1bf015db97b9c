"""Which job a process belongs to, from its ``/proc/<pid>/cgroup`` (DESIGN.md §3, ``job_ref``).

``/proc/<pid>/cgroup`` has one line per hierarchy, ``<id>:<controllers>:<path>``: many lines under
cgroup v1 (``4:memory:/slurm/uid_1000/job_12345/step_0``), one line ``0::<path>`` under cgroup v2.
The paths name the job whatever the controller, so every line is searched, most specific kind first:

- Slurm: ``job_<id>`` (``/slurm/uid_1000/job_12345/step_0/task_0`` with cgroup v1,
  ``/slurm_<node>/uid_…/job_…`` when several slurmd share a host,
  ``/system.slice/slurmstepd.scope/job_12345/step_batch/user/task_0`` with cgroup v2).
- Kubernetes: ``k8s-pod:<pod uid>`` (cgroupfs driver ``/kubepods/burstable/pod<uid>/<container>``,
  systemd driver ``…/kubepods-burstable-pod<uid with _ for ->.slice/…``; the uid is given with dashes).
- A container outside Kubernetes: ``container:<64-hex id>`` (Docker ``/docker/<id>`` or
  ``docker-<id>.scope``, containerd ``cri-containerd-<id>.scope``, CRI-O ``crio-<id>.scope``, Podman
  ``libpod-<id>.scope``, nerdctl ``nerdctl-<id>.scope``).
- Anything else (a login session, a system service, the root cgroup): ``None``.

Stdlib only: the node agent runs without Django.
"""

from __future__ import annotations

import re

_SLURM = re.compile(r"(?:^|/)[^/]*slurm[^/]*/(?:[^/]+/)*?job_(\d+)(?:/|$)")
# Pod uids are UUIDs; static (mirror) pods use a 32-hex config hash instead.
_POD_ID = r"[0-9a-fA-F]{8}[-_]?[0-9a-fA-F]{4}[-_]?[0-9a-fA-F]{4}[-_]?[0-9a-fA-F]{4}[-_]?[0-9a-fA-F]{12}"
_K8S_CGROUPFS = re.compile(rf"(?:^|/)kubepods(?:/[^/]+)*?/pod({_POD_ID})(?:/|$)")
_K8S_SYSTEMD = re.compile(rf"kubepods(?:-[a-z]+)?-pod({_POD_ID})\.slice(?:/|$)")
_CONTAINER_DIR = re.compile(r"(?:^|/)docker/([0-9a-f]{64})(?:/|$)")
_CONTAINER_SCOPE = re.compile(r"(?:^|/)(?:docker|cri-containerd|crio|libpod|nerdctl)-([0-9a-f]{64})\.scope(?:/|$)")


def cgroup_paths(text: str) -> list[str]:
    """The cgroup paths of a ``/proc/<pid>/cgroup`` file, one per hierarchy line."""
    paths = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) == 3 and parts[2]:
            paths.append(parts[2])
    return paths


def job_ref_from_cgroup(text: str) -> str | None:
    """``job_<id>``, ``k8s-pod:<uid>``, ``container:<id>`` or ``None`` for a ``/proc/<pid>/cgroup`` text."""
    paths = cgroup_paths(text)
    for path in paths:
        if match := _SLURM.search(path):
            return f"job_{match.group(1)}"
    for path in paths:
        if match := _K8S_CGROUPFS.search(path) or _K8S_SYSTEMD.search(path):
            return f"k8s-pod:{_normalise_pod_uid(match.group(1))}"
    for path in paths:
        if match := _CONTAINER_SCOPE.search(path) or _CONTAINER_DIR.search(path):
            return f"container:{match.group(1)}"
    return None


def _normalise_pod_uid(raw: str) -> str:
    """The systemd driver writes the pod uid with ``_`` for ``-`` (a ``-`` means nesting in a slice name)."""
    return raw.replace("_", "-").lower()

"""job_ref from /proc/<pid>/cgroup (agents/backends/cgroup.py): Slurm, Kubernetes, containers, none."""

import pytest

from agents.backends.cgroup import cgroup_paths, job_ref_from_cgroup

POD = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
POD_SYSTEMD = POD.replace("-", "_")
CONTAINER = "3f4e" * 16
OTHER_CONTAINER = "ab" * 32

# A Slurm task under cgroup v1: every controller Slurm manages names the job; systemd's does not.
SLURM_V1 = """\
12:pids:/slurm/uid_1000/job_12345/step_0/task_0
11:devices:/slurm/uid_1000/job_12345/step_0/task_0
10:memory:/slurm/uid_1000/job_12345/step_0/task_0
9:freezer:/slurm/uid_1000/job_12345/step_0
4:cpuset:/slurm/uid_1000/job_12345/step_0
3:cpu,cpuacct:/system.slice/slurmd.service
1:name=systemd:/system.slice/slurmd.service
0::/system.slice/slurmd.service
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(SLURM_V1, "job_12345", id="slurm-cgroup-v1"),
        pytest.param("4:memory:/slurm_node07/uid_1000/job_991/step_batch/task_0\n", "job_991", id="slurm-v1-per-node"),
        pytest.param("0::/system.slice/slurmstepd.scope/job_12345/step_0/user/task_0\n", "job_12345", id="slurm-v2"),
        pytest.param("0::/system.slice/slurmstepd.scope/job_12345/step_batch/user/task_0\n", "job_12345",
                     id="slurm-v2-batch-step"),
        pytest.param("0::/system.slice/node07_slurmstepd.scope/job_88/step_extern/user/task_special\n", "job_88",
                     id="slurm-v2-per-node"),
        pytest.param(f"0::/kubepods/burstable/pod{POD}/{CONTAINER}\n", f"k8s-pod:{POD}", id="k8s-cgroupfs-v2"),
        pytest.param(f"11:memory:/kubepods/besteffort/pod{POD}/{CONTAINER}\n1:name=systemd:/kubepods/besteffort/pod{POD}/{CONTAINER}\n",
                     f"k8s-pod:{POD}", id="k8s-cgroupfs-v1"),
        pytest.param(f"0::/kubepods/pod{POD}/{CONTAINER}\n", f"k8s-pod:{POD}", id="k8s-cgroupfs-guaranteed"),
        pytest.param(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_SYSTEMD}.slice/cri-containerd-{CONTAINER}.scope\n",
            f"k8s-pod:{POD}", id="k8s-systemd-v2-containerd",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-pod{POD_SYSTEMD}.slice/crio-{CONTAINER}.scope\n",
            f"k8s-pod:{POD}", id="k8s-systemd-guaranteed-crio",
        ),
        pytest.param(
            f"10:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_SYSTEMD}.slice/docker-{CONTAINER}.scope\n",
            f"k8s-pod:{POD}", id="k8s-systemd-v1-docker",
        ),
        pytest.param(
            f"0::/kubepods/burstable/pod{POD.upper()}/{CONTAINER}\n", f"k8s-pod:{POD}", id="k8s-uid-normalised-lowercase",
        ),
        pytest.param(f"12:memory:/docker/{CONTAINER}\n1:name=systemd:/docker/{CONTAINER}\n", f"container:{CONTAINER}",
                     id="docker-cgroupfs-v1"),
        pytest.param(f"0::/system.slice/docker-{CONTAINER}.scope\n", f"container:{CONTAINER}", id="docker-systemd-v2"),
        pytest.param(f"0::/system.slice/containerd.service/cri-containerd-{CONTAINER}.scope\n", f"container:{CONTAINER}",
                     id="containerd"),
        pytest.param(f"0::/machine.slice/libpod-{CONTAINER}.scope/container\n", f"container:{CONTAINER}", id="podman"),
        pytest.param("0::/user.slice/user-1000.slice/session-4.scope\n", None, id="login-session"),
        pytest.param("0::/system.slice/jupyterhub.service\n", None, id="system-service"),
        pytest.param("0::/\n", None, id="root-cgroup"),
        pytest.param("", None, id="empty"),
        pytest.param("12:memory:/user.slice/job_123\n", None, id="job-dir-outside-slurm"),
        pytest.param(f"0::/system.slice/docker-{CONTAINER[:12]}.scope\n", None, id="short-container-id"),
        pytest.param("0::/kubepods/burstable/podnot-a-uid/abc\n", None, id="not-a-pod-uid"),
    ],
)
def test_it_finds_the_job_of_a_cgroup(text, expected):
    assert job_ref_from_cgroup(text) == expected


def test_it_prefers_the_slurm_job_over_a_container_it_runs():
    text = f"0::/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n1:name=systemd:/docker/{CONTAINER}\n"
    assert job_ref_from_cgroup(text) == "job_5"


def test_it_prefers_the_pod_over_its_container():
    text = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_SYSTEMD}.slice/docker-{OTHER_CONTAINER}.scope"
    assert job_ref_from_cgroup(text) == f"k8s-pod:{POD}"


def test_it_reads_every_hierarchy_line():
    text = f"1:name=systemd:/user.slice\n0::/system.slice/docker-{CONTAINER}.scope"
    assert cgroup_paths(text) == ["/user.slice", f"/system.slice/docker-{CONTAINER}.scope"]
    assert job_ref_from_cgroup(text) == f"container:{CONTAINER}"


def test_it_keeps_colons_in_paths():
    assert cgroup_paths("5:memory:/weird:path/job\n") == ["/weird:path/job"]

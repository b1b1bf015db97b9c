"""What the agent costs a node: CPU time per sampling cycle and the peak memory of an agent
process. ``measure_agent()`` is what ``make bench`` calls; ``python -m bench.agent`` prints it.

Two measurements:

- ``cycle_cpu_ms``: in this process, ``cycles`` steady-state cycles of the sim backend (8 GPUs by
  default) each appended to a spool in its own transaction, as a real-time agent does every
  interval: CPU time (user + system) per cycle, fsync included.
- ``agent_*``: a real ``python -m agents run`` subprocess (sim, accelerated clock) that produces
  ``cycles`` intervals and serves them all over /v1/samples; its peak RSS and total CPU time come
  from ``os.wait4`` (``resource`` usage of the child), interpreter start-up included.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from agents.backends.sim import SimBackend
from agents.config import hash_token
from agents.spool import Spool

_TOKEN = "bench-token"  # noqa: S105 (a throwaway token for a local benchmark agent)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> dict[str, Any]:
    # The URL is always http://127.0.0.1:<port>/… built here, never user input.
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {_TOKEN}"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return json.loads(response.read())


def _reap(process: subprocess.Popen, *, timeout_s: float) -> Any:
    """Wait for ``process`` (SIGKILL after ``timeout_s``) and return its resource usage."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return usage
        if time.monotonic() > deadline:
            process.kill()
            deadline = float("inf")
        time.sleep(0.02)


def measure_cycles(*, cycles: int, gpus: int, interval_s: int, folder: Path) -> dict[str, float]:
    backend = SimBackend(hostname="bench-node", gpus=gpus, model="H200", seed=1)
    spool = Spool(folder / "cycles.sqlite")
    ts = int(time.time()) // interval_s * interval_s - cycles * interval_s
    started = _cpu_s()
    for _cycle in range(cycles):
        ts += interval_s
        spool.append(backend.sample(ts=ts, interval_s=interval_s), now=ts)
    spent = _cpu_s() - started
    spool.close()
    return {"cycle_cpu_ms": round(spent / cycles * 1000, 3)}


def measure_process(*, cycles: int, gpus: int, interval_s: int, folder: Path, timeout_s: float = 60) -> dict[str, Any]:
    port = _free_port()
    command = [
        sys.executable, "-m", "agents", "run", "--backend", "sim", "--gpus", str(gpus), "--hostname", "bench-node",
        "--listen", f"127.0.0.1:{port}", "--token-sha256", hash_token(_TOKEN), "--spool", str(folder / "agent.sqlite"),
        "--interval", str(interval_s), "--start", f"{time.time() - cycles * interval_s:.0f}", "--speed", "100000",
        "--log-level", "warning",
    ]
    root = Path(__file__).resolve().parent.parent
    process = subprocess.Popen(command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    served, after = 0, 0
    try:
        while time.monotonic() < deadline and served < cycles * gpus:
            try:
                page = _get(f"http://127.0.0.1:{port}/v1/samples?after={after}&limit=20000")
            except OSError:
                time.sleep(0.05)  # not listening yet
                continue
            served += len(page["records"])
            after = page["last_seq"]
            if not page["more"]:
                time.sleep(0.05)
    finally:
        peak_kib = _peak_rss_kib(process.pid)
        process.send_signal(signal.SIGTERM)
        usage = _reap(process, timeout_s=10)
    return {
        "agent_records_served": served,
        # VmHWM of the agent's own image: wait4's ru_maxrss would also count the parent's pages the child
        # shared between fork and exec (a big benchmarking parent made it read 1.5 GiB).
        "agent_peak_rss_mib": round((peak_kib or usage.ru_maxrss) / 1024, 1),
        "agent_cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "agent_exit_code": process.returncode,
    }


def _peak_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def measure_agent(*, cycles: int = 360, gpus: int = 8, interval_s: int = 10) -> dict[str, Any]:
    """CPU per cycle (in process) and peak RSS / CPU of a real agent process, for ``gpus`` simulated
    GPUs over ``cycles`` intervals."""
    with tempfile.TemporaryDirectory(prefix="cardhour-bench-") as folder:
        result: dict[str, Any] = {"cycles": cycles, "gpus": gpus}
        result |= measure_cycles(cycles=cycles, gpus=gpus, interval_s=interval_s, folder=Path(folder))
        result |= measure_process(cycles=cycles, gpus=gpus, interval_s=interval_s, folder=Path(folder))
        result["agent_cpu_ms_per_cycle"] = round(result["agent_cpu_s"] / cycles * 1000, 3)
        return result


if __name__ == "__main__":
    print(json.dumps(measure_agent(), indent=2))

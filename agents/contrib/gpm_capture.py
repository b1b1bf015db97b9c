"""Capture what NVML GPM gives on a real NVIDIA machine, as a fixture for tests/agents/test_gpm_fixture.py.

    python agents/contrib/gpm_capture.py --out DIR

Runs the agent's nvml backend (``agents.backends.nvml.NvmlBackend``, GPM included) for about a minute,
sampling every 5 s just after each boundary as the agent's sampler does: about 25 s idle, then about
30 s under a small load (a bf16 matmul and fp32 elementwise loop in a PyTorch subprocess, where
``import torch`` works and CUDA is available; otherwise idle only), and writes
``DIR/nvml-h200-<YYYY-MM-DD>.json``: the format of tests/agents/fixtures/README.md (``inventory`` and a
``samples`` body, so the nvml capture test reads it too) plus ``gpm`` (each GPU's
``nvmlGpmQueryDeviceSupport`` answer, and whether GPM gave values), ``host`` (driver, NVML and
nvidia-ml-py versions, whether it ran as root), ``phases`` (which intervals were idle and which under
load) and the backend's log.

Bounded: it finishes within two minutes (``--max-seconds``, 100 by default; the load subprocess stops
itself at its deadline and is killed after it). Without a GPU, a driver or nvidia-ml-py it says so on
stderr and exits with 2. No Django: the repository and nvidia-ml-py are enough.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.metadata
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: import agents.* from this checkout

from agents.backends.nvml import NvmlBackend  # noqa: E402
from agents.records import GPM_FIELDS  # noqa: E402

NO_GPU = 2
# The load, in its own process so that a CUDA hang can be killed and the agent's process never opens CUDA.
LOAD = r"""
import sys, time
seconds, deadline = float(sys.argv[1]), float(sys.argv[2])
try:
    import torch
except Exception as exc:
    print("skip", f"import torch failed: {exc!r}", flush=True); sys.exit(0)
if not torch.cuda.is_available():
    print("skip", "torch sees no CUDA device", flush=True); sys.exit(0)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
x = torch.randn(64 << 20, device="cuda", dtype=torch.float32)
torch.cuda.synchronize()
start = time.time()
print("ready", start, torch.cuda.get_device_name(0), flush=True)
end, steps = min(start + seconds, deadline), 0
while time.time() < end:
    for _ in range(20):
        c = a @ b
    x.mul_(1.0000001).add_(1e-7)
    torch.cuda.synchronize()
    steps += 1
print("done", time.time(), steps, flush=True)
"""


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name} {record.getMessage()}")


class Load:
    """The load subprocess and what it reported: ``ready``/``done`` times (epoch s) or why it was skipped."""

    def __init__(self, *, seconds: float, deadline: float) -> None:
        self.seconds, self.deadline = seconds, deadline
        self.process: subprocess.Popen[str] | None = None
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in stop)
        self.spawned_at: float | None = None
        self.report: dict[str, Any] = {"ran": False}

    def spawn(self) -> None:
        self.spawned_at = time.time()
        self.report["spawned_at"] = self.spawned_at
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", LOAD, str(self.seconds), str(self.deadline)],
                stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            )
        except OSError as exc:
            self.report.update(skipped=f"could not start the load: {exc}", ended_at=time.time())
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            word, _, rest = line.strip().partition(" ")
            if word == "ready":
                at, _, device = rest.partition(" ")
                self.report.update(ran=True, ready_at=float(at), device=device)
            elif word == "done":
                at, _, steps = rest.partition(" ")
                self.report.update(ended_at=float(at), steps=int(steps))
            elif word == "skip":
                self.report.update(skipped=rest, ended_at=time.time())

    @property
    def ended(self) -> float | None:
        return self.report.get("ended_at")

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=5)
            self.report["exit_code"] = self.process.returncode
            self.stderr.seek(0)
            stderr = self.stderr.read().strip()
            if stderr:
                self.report["stderr_tail"] = stderr[-2000:]
        self.stderr.close()


def probe_gpm(nvml: Any) -> list[dict[str, Any]]:
    """Each GPU's raw GPM answers: ``nvmlGpmQueryDeviceSupport``, streaming state, MIG mode."""
    found = []
    for index in range(nvml.nvmlDeviceGetCount()):
        entry: dict[str, Any] = {"index": index}
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            entry["uuid"] = _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as exc:
            entry["error"] = _error(exc)
            found.append(entry)
            continue
        queries = (("isSupportedDevice", lambda h: bool(nvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)),
                   ("streaming_enabled", lambda h: nvml.nvmlGpmQueryIfStreamingEnabled(h)),
                   ("mig_mode", lambda h: list(nvml.nvmlDeviceGetMigMode(h))))
        for key, query in queries:
            try:
                entry[key] = query(handle)
            except (nvml.NVMLError, AttributeError) as exc:
                entry[key] = None
                entry[f"{key}_error"] = _error(exc)
        found.append(entry)
    return found


def capture(backend: NvmlBackend, *, interval_s: int, idle_s: float, load_s: float, stop_at: float) -> dict[str, Any]:
    """Sample at each boundary until the load has run and one interval more, or ``stop_at`` (epoch s)."""
    started = time.time()
    load = Load(seconds=load_s, deadline=stop_at - interval_s)
    records: list[dict[str, Any]] = []
    boundary = (math.floor(started / interval_s) + 1) * interval_s
    try:
        while boundary + 0.2 <= stop_at:
            time.sleep(max(0.0, boundary + 0.2 - time.time()))  # just after the boundary, as the sampler does
            for record in backend.sample(ts=boundary, interval_s=interval_s):
                records.append({"seq": len(records) + 1, **record})
            print(f"ts={boundary}: {len(records)} records", file=sys.stderr)
            if load.spawned_at is None and time.time() >= started + idle_s:
                load.spawn()
            ended = load.ended
            if ended is not None and boundary >= max(ended, started + idle_s + load_s) + interval_s:
                break
            boundary += interval_s
    finally:
        load.stop()
    spawned = load.spawned_at or math.inf
    ready, ended = load.report.get("ready_at"), load.ended or math.inf
    stamps = sorted({record["ts"] for record in records})
    return {
        "records": records,
        "phases": {
            "interval_s": interval_s,
            "started_at": started,
            "load": load.report,
            "idle_ts": [ts for ts in stamps if ts <= spawned],
            "load_ts": [ts for ts in stamps if ready is not None and ts - interval_s >= ready and ts <= ended],
        },
    }


def main(argv: list[str] | None = None, *, nvml: Any = None) -> int:
    """The command; ``nvml`` defaults to pynvml (tests give the fake)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write nvml-<model>-<date>.json in")
    parser.add_argument("--model", default="h200", help="the file name's model part (default h200)")
    parser.add_argument("--interval", type=int, default=5, help="sample interval in seconds (default 5)")
    parser.add_argument("--idle", type=float, default=25, help="seconds idle before the load (default 25)")
    parser.add_argument("--load", type=float, default=30, help="seconds of load (default 30)")
    parser.add_argument("--max-seconds", type=float, default=100, help="stop sampling after this (default 100)")
    args = parser.parse_args(argv)
    collected = _Collect()
    agents_log = logging.getLogger("agents")
    level = agents_log.level
    agents_log.addHandler(collected)
    agents_log.setLevel(logging.DEBUG)
    faulthandler.dump_traceback_later(args.max_seconds + 15, exit=True, file=sys.__stderr__)  # a hung call ends it
    try:
        return _run(args, nvml, collected)
    finally:
        faulthandler.cancel_dump_traceback_later()
        agents_log.removeHandler(collected)
        agents_log.setLevel(level)


def _run(args: argparse.Namespace, nvml: Any, collected: _Collect) -> int:
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            print(f"no NVML binding: nvidia-ml-py is not installed ({exc}); nothing captured", file=sys.stderr)
            return NO_GPU
    try:
        backend = NvmlBackend(nvml=nvml)
    except nvml.NVMLError as exc:
        print(f"no NVIDIA GPU or driver here: NVML did not start ({_error(exc)}); nothing captured", file=sys.stderr)
        return NO_GPU
    try:
        inventory = backend.inventory()
        if not inventory["gpus"]:
            print("NVML started but sees no GPU; nothing captured", file=sys.stderr)
            return NO_GPU
        host = {
            "root": os.geteuid() == 0,
            "driver_version": inventory["driver_version"],
            "cuda_version": inventory["cuda_version"],
            "nvml_version": _safe(lambda: _text(nvml.nvmlSystemGetNVMLVersion())),
            "pynvml_version": _safe(lambda: importlib.metadata.version("nvidia-ml-py")),
        }
        support = probe_gpm(nvml)
        run = capture(backend, interval_s=args.interval, idle_s=args.idle, load_s=args.load,
                      stop_at=time.time() + args.max_seconds)
    finally:
        backend.close()
    records = run["records"]
    by_device: dict[str, list[str]] = {}
    for record in records:
        seen = by_device.setdefault(record["gpu_uuid"], [])
        seen += [name for name in GPM_FIELDS if record[name] is not None and name not in seen]
    now = datetime.now(UTC)
    document = {
        "captured_at": now.isoformat(timespec="seconds"),
        "source": "agents/contrib/gpm_capture.py (NvmlBackend without spool/HTTP)",
        "inventory": inventory,
        "samples": {"spool_id": uuid.uuid4().hex, "records": records, "last_seq": len(records), "more": False,
                    "dropped_total": 0},
        "gpm": {"support": support, "worked": any(by_device.values()), "fields_with_values": by_device},
        "host": host,
        "phases": run["phases"],
        "diagnostics": {"log": collected.lines},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"nvml-{args.model}-{now:%Y-%m-%d}.json"
    path.write_text(json.dumps(document, indent=1) + "\n")
    load = run["phases"]["load"]
    print(f"wrote {path}: {len(records)} records, GPM {'worked' if document['gpm']['worked'] else 'gave nothing'}, "
          f"load {'ran' if load.get('ran') else 'skipped: ' + str(load.get('skipped'))}", file=sys.stderr)
    return 0


def _text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _safe(call: Any) -> Any:
    try:
        return call()
    except Exception as exc:  # a diagnostic that failed is recorded, not fatal
        return _error(exc)


if __name__ == "__main__":
    sys.exit(main())

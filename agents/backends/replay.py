"""The ``replay`` backend: plays back one node's rows of a generic samples CSV (DESIGN.md §3)

    ts,node,gpu,util_gpu[,mem_used_mib,power_w,interval_s][,gpu_model][,sm_active,…,pcie_tx_mibs]

Header required; ``ts`` is ISO-8601 with a UTC offset or epoch seconds; ``gpu`` is the GPU's index on
that node or its UUID. The NVML GPM fields are optional columns named as the record's fields
(:data:`agents.records.GPM_FIELDS`: ``sm_active``, ``sm_occupancy``, ``tensor_active``, …,
``pcie_tx_mibs``), an empty cell or a missing column null, each range-checked as the collector checks
it (:data:`agents.records.FLOAT_RANGES`). Rows of other nodes are ignored; other columns are ignored.

Each row becomes one record at its own time (rounded to the second, never moved onto the agent's
interval grid), so replayed records come at irregular times. The sampler therefore drives this
backend through its ``records_between(after, upto)`` extension (see agents/sampler.py): every tick
it asks for the rows whose time the agent's clock has just passed. With an accelerated clock that
starts at :meth:`ReplayBackend.first_ts`, every row comes out, in time order.

A row without ``interval_s`` covers the median gap between that GPU's consecutive rows, capped at
5 minutes (:func:`median_gap_interval`). ``energy_j`` is ``power_w × interval_s`` when ``power_w`` is
given. The server's ``import_samples`` reads the same format and may import :func:`replay_gpu_uuid`
and :func:`median_gap_interval` to give the same GPUs and intervals.
"""

from __future__ import annotations

import bisect
import csv
import itertools
import math
import statistics
import uuid
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import agents
from agents.backends.gpu_models import find_model
from agents.backends.sim import UUID_NAMESPACE
from agents.records import FLOAT_RANGES, GPM_FIELDS, Record, empty_record

REQUIRED_COLUMNS = ("ts", "node", "gpu", "util_gpu")
MAX_INFERRED_INTERVAL_S = 300


def replay_gpu_uuid(node: str, index: int) -> str:
    """The UUID of GPU ``index`` on ``node`` when a CSV names it only by index:
    ``"GPU-" + str(uuid.uuid5(UUID("6f1c3a52-8f0e-4c1e-9a53-2b7d7e0c9d11"), f"{node}/{index}"))``.

    The same function as demo/cluster.py's ``demo_gpu_uuid`` and the simulator's with seed 0, so a
    replayed node, a simulated node and the demo data set agree on what "gpu-h200-01 GPU 3" is."""
    return f"GPU-{uuid.uuid5(UUID_NAMESPACE, f'{node}/{index}')}"


def median_gap_interval(times: list[float], *, default: int, cap: int = MAX_INFERRED_INTERVAL_S) -> int:
    """Seconds a record covers when its source does not say: the median gap between one GPU's
    consecutive record times (repeated times ignored), capped at ``cap``, at least 1. ``default``
    when there is no gap to measure (a single row)."""
    ordered = sorted(set(times))
    gaps = [b - a for a, b in itertools.pairwise(ordered)]
    if not gaps:
        return default
    return max(1, min(cap, round(statistics.median(gaps))))


def parse_time(text: str) -> float:
    """Epoch seconds from epoch seconds or ISO-8601 with an offset (``Z`` included)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError("an ISO-8601 time needs a UTC offset (e.g. 2026-11-02T08:00:00+00:00)")
    return moment.timestamp()


class ReplayBackend:
    """Plays ``path``'s rows for ``node``. ``interval_s`` (the agent's) is the interval of a GPU with
    a single row and no ``interval_s`` column."""

    def __init__(self, *, path: str | Path, node: str, interval_s: int = 10) -> None:
        self.path, self.node = Path(path), node
        self._gpus: dict[str, dict[str, Any]] = {}  # uuid → inventory entry
        rows = self._load(interval_s)
        rows.sort(key=lambda pair: pair[0])  # stable: rows of one time keep file order
        self._times = [ts for ts, _record in rows]
        self._records = [record for _ts, record in rows]

    def first_ts(self) -> int | None:
        """Time of the earliest row for this node (None if it has none): a good clock start."""
        return self._times[0] if self._times else None

    def records_between(self, after: float, upto: float) -> list[Record]:
        """Records with ``after < ts <= upto``, in time order (copies: callers may change them)."""
        low = bisect.bisect_right(self._times, after)
        high = bisect.bisect_right(self._times, upto)
        return [dict(record) for record in self._records[low:high]]

    def sample(self, *, ts: int, interval_s: int) -> list[Record]:
        """The protocol's hook, for callers that do not know the extension: rows in the interval."""
        return self.records_between(ts - interval_s, ts)

    def inventory(self) -> dict[str, Any]:
        return {
            "host": self.node,
            "agent_version": agents.__version__,
            "driver_version": None,
            "cuda_version": None,
            "gpus": sorted(self._gpus.values(), key=lambda gpu: (gpu["index"] is None, gpu["index"] or 0, gpu["uuid"])),
        }

    def close(self) -> None:
        pass

    # -- loading ------------------------------------------------------------------------------

    def _load(self, default_interval_s: int) -> list[tuple[int, Record]]:
        pending: list[tuple[int, Record, bool]] = []  # (ts, record, interval given)
        times_by_gpu: dict[str, list[float]] = defaultdict(list)
        with self.path.open(newline="", encoding="utf-8-sig") as file:
            reader = csv.DictReader(file)
            header = [name.strip() for name in reader.fieldnames or []]
            missing = [name for name in REQUIRED_COLUMNS if name not in header]
            if missing:
                raise ValueError(f"{self.path}: the header must name {','.join(REQUIRED_COLUMNS)} (missing: {', '.join(missing)})")
            reader.fieldnames = header
            for line, row in enumerate(reader, start=2):
                if (row.get("node") or "").strip() != self.node:
                    continue
                try:
                    ts, record, given = self._record(row)
                except ValueError as error:
                    raise ValueError(f"{self.path}:{line}: {error}") from None
                times_by_gpu[record["gpu_uuid"]].append(ts)
                pending.append((ts, record, given))
        inferred = {
            gpu: median_gap_interval(times, default=default_interval_s) for gpu, times in times_by_gpu.items()
        }
        rows = []
        for ts, record, given in pending:
            if not given:
                record["interval_s"] = inferred[record["gpu_uuid"]]
            if record["power_w"] is not None:
                record["energy_j"] = round(record["power_w"] * record["interval_s"], 3)
            rows.append((ts, record))
        return rows

    def _record(self, row: dict[str, str | None]) -> tuple[int, Record, bool]:
        def cell(name: str) -> str:
            return (row.get(name) or "").strip()

        try:
            ts = round(parse_time(cell("ts")))
        except ValueError as error:
            raise ValueError(f"ts: {error}") from None
        gpu_uuid = self._gpu(cell("gpu"), cell("gpu_model"))
        given = bool(cell("interval_s"))
        record = empty_record(ts=ts, gpu_uuid=gpu_uuid, interval_s=_number(cell("interval_s"), "interval_s", int, 1, 3600) or 0)
        record["util_gpu"] = _number(cell("util_gpu"), "util_gpu", float, 0, 100)
        record["mem_used_mib"] = _number(cell("mem_used_mib"), "mem_used_mib", int, 0, None)
        record["power_w"] = _number(cell("power_w"), "power_w", float, 0, None)
        for name in GPM_FIELDS:
            record[name] = _number(cell(name), name, float, *FLOAT_RANGES[name])
        record["mem_total_mib"] = self._gpus[gpu_uuid]["memory_mib"]
        return ts, record, given

    def _gpu(self, text: str, model_name: str) -> str:
        """The UUID of a row's GPU, registering it for the inventory on first sight."""
        if not text:
            raise ValueError("gpu: empty (an index on the node or a GPU UUID)")
        index = int(text) if text.isdigit() else None
        gpu_uuid = replay_gpu_uuid(self.node, index) if index is not None else text
        if gpu_uuid not in self._gpus:
            spec = find_model(model_name) if model_name else None
            self._gpus[gpu_uuid] = {
                "index": index, "uuid": gpu_uuid, "name": spec.name if spec else (model_name or None),
                "memory_mib": spec.memory_mib if spec else None, "pci_bus_id": None,
                "mig_mode": None, "mig_instances": [],
            }
        return gpu_uuid


def _number(text: str, column: str, kind: type, low: float, high: float | None) -> Any:
    """A cell as ``kind`` (int cells may be written as 12.0), or None if empty; range-checked."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column}: {text!r} is not a number") from None
    if not math.isfinite(value) or value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{column}: {text!r} is out of range ({bound})")
    return round(value) if kind is int else value

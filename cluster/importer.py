"""``import_samples``: history from the generic samples CSV (DESIGN.md §3) through the same validation
and upsert path as collection (cluster.ingest). Unknown nodes and GPUs are created; the age and
unknown-GPU rules of collection do not apply to imports."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from agents.backends.replay import median_gap_interval, parse_time, replay_gpu_uuid
from cluster.ingest import ingest_json_lines
from cluster.inventory_sync import gpu_model_for
from cluster.models import Gpu, GpuModel, Node
from cluster.models.inventory import hostname_validator
from cluster.services import node_status_set

REQUIRED_COLUMNS = ("ts", "node", "gpu", "util_gpu")
DEFAULT_INTERVAL_S = 10  # a GPU with a single row and no interval_s: the agent's default interval
CHUNK = 50_000
HISTORY_AGE_S = 100 * 365 * 86400  # imports are history: no age limit


@dataclass
class ImportReport:
    rows_read: int = 0
    imported: int = 0
    duplicates: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    nodes_created: list[str] = field(default_factory=list)
    gpus_created: int = 0

    def summary(self) -> str:
        return (
            f"rows read {self.rows_read}, imported {self.imported}, already present {self.duplicates}, "
            f"rejected {len(self.rejected)}; nodes created {len(self.nodes_created)}, GPUs created {self.gpus_created}"
        )


class ImportRefused(Exception):
    """The file cannot be imported at all (missing columns, or ``--strict`` and a bad row)."""


def import_samples(path: Path, *, strict: bool = False, now: datetime | None = None) -> ImportReport:
    """Import a samples CSV. Bad rows are reported by line; the rest are kept unless ``strict``."""
    now = now or timezone.now()
    report = ImportReport()
    rows = list(_read_rows(path, report))
    # Even with --strict every row is checked, so the refusal lists all bad rows at once.
    with transaction.atomic():
        uuids = _ensure_gpus(rows, report)
        lines = _json_lines(rows, uuids)
        for start in range(0, len(lines), CHUNK):
            blob = b"".join(lines[start : start + CHUNK])
            result = ingest_json_lines(
                blob, node_id=None, now=now, max_future_s=600, max_age_s=HISTORY_AGE_S, need_seq=False
            )
            report.imported += result.stored
            report.duplicates += result.seen - result.rejected_total - result.stored
            report.rejected.extend(result.rejected_lines)
        report.rejected.sort()
        if strict and report.rejected:
            transaction.set_rollback(True)
            raise ImportRefused(_refusal(report))
    return report


def _refusal(report: ImportReport) -> str:
    shown = "; ".join(f"line {line}: {reason}" for line, reason in report.rejected[:20])
    more = f" (and {len(report.rejected) - 20} more)" if len(report.rejected) > 20 else ""
    return f"--strict: {len(report.rejected)} bad row(s), nothing imported: {shown}{more}"


@dataclass
class _Row:
    line: int
    ts: int
    node: str
    gpu: str  # an index on the node, or a UUID
    util_gpu: float | None
    mem_used_mib: int | None
    power_w: float | None
    interval_s: int | None
    gpu_model: str


def _read_rows(path: Path, report: ImportReport):
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ImportRefused(f"the header lacks the required column(s) {', '.join(missing)} (needs {', '.join(REQUIRED_COLUMNS)})")
        for line, raw in enumerate(reader, start=2):
            report.rows_read += 1
            try:
                yield _parse(line, raw)
            except ValueError as error:
                report.rejected.append((line, f"parse: {error}"))


def _parse(line: int, raw: dict) -> _Row:
    def cell(name):
        return (raw.get(name) or "").strip()

    try:
        ts = round(parse_time(cell("ts")))
    except ValueError as error:
        raise ValueError(f"ts: {error}" if "offset" in str(error) else f"ts: {cell('ts')!r} is not ISO-8601 or epoch seconds") from None
    node = cell("node")
    try:
        hostname_validator(node)
    except Exception:
        raise ValueError(f"node: {node!r} is not a hostname") from None
    gpu = cell("gpu")
    if not gpu:
        raise ValueError("gpu: empty (an index on the node or a GPU UUID)")
    return _Row(
        line=line, ts=ts, node=node, gpu=gpu,
        util_gpu=_number(cell("util_gpu"), "util_gpu", float),
        mem_used_mib=_number(cell("mem_used_mib"), "mem_used_mib", int),
        power_w=_number(cell("power_w"), "power_w", float),
        interval_s=_number(cell("interval_s"), "interval_s", int),
        gpu_model=cell("gpu_model"),
    )


def _number(text: str, column: str, kind):
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column}: {text!r} is not a number") from None
    if kind is int:
        if value != int(value):
            raise ValueError(f"{column}: {text!r} is not a whole number")
        return int(value)
    return value


def _ensure_gpus(rows: list[_Row], report: ImportReport) -> dict[tuple[str, str], str]:
    """Create unknown nodes and GPUs; return (node, gpu column) → GPU UUID."""
    keys = {(row.node, row.gpu): row.gpu_model for row in rows}
    nodes = {n.hostname: n for n in Node.objects.filter(hostname__in={node for node, _gpu in keys})}
    for hostname in sorted({node for node, _gpu in keys} - set(nodes)):
        node = Node.objects.create(hostname=hostname, pool="imported")
        node_status_set(node=node, status=node.status, reason="created by import_samples")
        nodes[hostname] = node
        report.nodes_created.append(hostname)
    unknown_model = None
    uuids = {key: replay_gpu_uuid(key[0], int(key[1])) if key[1].isdigit() else key[1] for key in keys}
    known = set(Gpu.objects.filter(uuid__in=set(uuids.values())).values_list("uuid", flat=True))  # one query
    for (hostname, gpu), model_name in keys.items():
        uuid = uuids[(hostname, gpu)]
        if uuid in known:
            continue
        known.add(uuid)
        if model_name:
            model = gpu_model_for(model_name, None)
        else:
            unknown_model = unknown_model or GpuModel.objects.get_or_create(
                name="unknown", defaults={"short_name": "unknown", "memory_mib": 0}
            )[0]
            model = unknown_model
        index = int(gpu) if gpu.isdigit() else _next_index(nodes[hostname])
        Gpu.objects.create(node=nodes[hostname], index=index, uuid=uuid, model=model, memory_mib=model.memory_mib)
        report.gpus_created += 1
    return uuids


def _next_index(node: Node) -> int:
    last = Gpu.objects.filter(node=node, mig_parent__isnull=True).order_by("-index").values_list("index", flat=True).first()
    return 0 if last is None else last + 1


def _json_lines(rows: list[_Row], uuids: dict[tuple[str, str], str]) -> list[bytes]:
    times = defaultdict(list)
    for row in rows:
        times[uuids[(row.node, row.gpu)]].append(row.ts)
    inferred = {uuid: median_gap_interval(ts, default=DEFAULT_INTERVAL_S) for uuid, ts in times.items()}
    lines = []
    for row in rows:
        uuid = uuids[(row.node, row.gpu)]
        interval = row.interval_s if row.interval_s is not None else inferred[uuid]
        record = {
            "line": row.line, "ts": row.ts, "gpu_uuid": uuid, "interval_s": interval, "util_gpu": row.util_gpu,
            "mem_used_mib": row.mem_used_mib, "power_w": row.power_w,
            # As the replay backend does: energy of the interval from its mean power.
            "energy_j": round(row.power_w * interval, 3) if row.power_w is not None else None,
        }
        lines.append(json.dumps(record, separators=(",", ":")).encode() + b"\n")
    return lines

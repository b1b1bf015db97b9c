"""``import_samples``: history from the generic samples CSV (DESIGN.md §3) through the same validation
and upsert path as collection (cluster.telemetry.ingest). Unknown nodes and GPUs are created; the age and
unknown-GPU rules of collection do not apply to imports.

    ts,node,gpu,util_gpu[,mem_used_mib,power_w,interval_s][,gpu_model][,sm_active,…,pcie_tx_mibs]

The NVML GPM fields are optional columns named as the record's fields (:data:`agents.records.GPM_FIELDS`:
``sm_active``, ``sm_occupancy``, ``tensor_active``, ``dram_active``, ``fp16_active``, ``fp32_active``,
``fp64_active`` in percent, ``nvlink_rx_mibs``, ``nvlink_tx_mibs``, ``pcie_rx_mibs``, ``pcie_tx_mibs`` in
MiB/s), as the agent's replay backend reads them: an empty cell or a missing column is null (never 0), a
value outside :data:`agents.records.FLOAT_RANGES` rejects its row. Other columns are ignored.

Every row is checked in Python before anything is created for it (times in the supported window,
numbers finite and in the ranges ingest enforces, the GPU a known one or one that may be created), so a
rejected row creates no node, GPU or GPU model; what is left to the database (a row repeating a stored
sample) cannot create anything either. The rules on the ``gpu`` column:

- an index (``0`` … :data:`GPU_INDEX_MAX`) names the node's GPU with that index in service, if it has
  one; else, on a node without an agent (created by an import, or registered by hand) a GPU is created
  with the index's replay UUID (``agents.backends.replay.replay_gpu_uuid``). A node with an agent has
  the GPUs its agent registered: an index it lacks is a rejected row.
- ``GPU-…`` is an NVML UUID: that GPU (it must be on the row's node), or a new one on the node.
- ``gpu_model`` (optional) names the model of a GPU the import creates, resolved by
  :class:`cluster.inventory.sync.GpuModelNames` (NVML name, short name, alias; else created).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from agents.backends.replay import median_gap_interval, parse_time, replay_gpu_uuid
from agents.records import FLOAT_RANGES, GPM_FIELDS, INT_RANGES, INTERVAL_S_RANGE
from cluster.choices import GpuStatus
from cluster.inventory.models import hostname_validator
from cluster.inventory.sync import GpuModelNames
from cluster.models import CollectionState, Gpu, Node
from cluster.status.services import node_status_set
from cluster.telemetry.ingest import ingest_json_lines
from core.import_lines import ImportRefused, csv_rows
from core.timewindow import WINDOW_TEXT, epoch_in_window

__all__ = ["ImportRefused", "ImportReport", "import_samples", "listed"]

REQUIRED_COLUMNS = ("ts", "node", "gpu", "util_gpu")
DEFAULT_INTERVAL_S = 10  # a GPU with a single row and no interval_s: the agent's default interval
CHUNK = 50_000
HISTORY_AGE_S = 100 * 365 * 86400  # imports are history: no age limit (the supported window bounds it)
GPU_INDEX_MAX = 63  # NVML indexes a node's GPUs from 0; no node holds 64
UUID_MAX = Gpu._meta.get_field("uuid").max_length
LISTED = 50  # names shown in a summary line before "and N more"


def listed(names: list[str]) -> str:
    """``a, b, c`` of at most :data:`LISTED` names, then ``(and N more)``."""
    shown = ", ".join(names[:LISTED])
    return shown + (f" (and {len(names) - LISTED} more)" if len(names) > LISTED else "")


@dataclass
class ImportReport:
    rows_read: int = 0
    imported: int = 0
    duplicates: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[tuple[int, str]] = field(default_factory=list)  # rows kept, with a caveat (bytes replaced)
    nodes_created: list[str] = field(default_factory=list)
    gpus_created_names: list[str] = field(default_factory=list)  # "hostname/index"
    models_created: list[str] = field(default_factory=list)
    encoding: str = "utf-8"

    @property
    def gpus_created(self) -> int:
        return len(self.gpus_created_names)

    def summary(self) -> str:
        lines = [
            f"rows read {self.rows_read}, imported {self.imported}, already present {self.duplicates}, "
            f"rejected {len(self.rejected)}; nodes created {len(self.nodes_created)}, GPUs created {self.gpus_created}"
        ]
        if self.encoding != "utf-8":
            lines.append(f"read as {self.encoding.upper()} (it had a byte-order mark)")
        if self.nodes_created:
            lines.append("nodes created: " + listed(self.nodes_created))
        if self.gpus_created_names:
            lines.append("GPUs created: " + listed(self.gpus_created_names))
        if self.models_created:
            lines.append("GPU models created (memory unknown; name them with an alias in the admin if they are "
                         "a known model under another name): " + listed(self.models_created))
        return "\n".join(lines)


def import_samples(path: Path, *, strict: bool = False, now: datetime | None = None) -> ImportReport:
    """Import a samples CSV. Bad rows are reported by line; the rest are kept unless ``strict``."""
    now = now or timezone.now()
    report = ImportReport()
    rows = list(_read_rows(path, report))
    # Even with --strict every row is checked, so the refusal lists all bad rows at once.
    with transaction.atomic():
        models = GpuModelNames()
        rows = _resolve_gpus(rows, report, models, now=now)
        lines = _json_lines(rows)
        for start in range(0, len(lines), CHUNK):
            blob = b"".join(lines[start : start + CHUNK])
            result = ingest_json_lines(
                blob, node_id=None, now=now, max_future_s=600, max_age_s=HISTORY_AGE_S, need_seq=False
            )
            report.imported += result.stored
            report.duplicates += result.seen - result.rejected_total - result.stored
            report.rejected.extend(result.rejected_lines)
        report.rejected.sort()
        report.models_created = models.created
        if strict and report.rejected:
            transaction.set_rollback(True)
            raise ImportRefused(_refusal(report))
        _complete_unagented_nodes(rows)
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
    gpm: dict[str, float] = field(default_factory=dict)  # the GPM fields the row gives (blank cells left out)
    uuid: str = ""  # the GPU's, once resolved


def _read_rows(path: Path, report: ImportReport):
    for line, raw in csv_rows(path, required=REQUIRED_COLUMNS, report=report, error_prefix="parse"):
        try:
            yield _parse(line, raw)
        except ValueError as error:
            report.rejected.append((line, str(error)))


def _parse(line: int, raw: dict) -> _Row:
    def cell(name):
        return (raw.get(name) or "").strip()

    text = cell("ts")
    try:
        seconds = parse_time(text)
    except (ValueError, OverflowError) as error:
        detail = str(error) if "offset" in str(error) else f"{text[:40]!r} is not ISO-8601 or epoch seconds"
        raise ValueError(f"parse: ts: {detail}") from None
    if not epoch_in_window(seconds):
        raise ValueError(f"ts: {text[:40]!r} is outside the supported window {WINDOW_TEXT}")
    node = cell("node")
    try:
        hostname_validator(node)
    except Exception:
        raise ValueError(f"parse: node: {node[:80]!r} is not a hostname") from None
    gpu = cell("gpu")
    if not gpu:
        raise ValueError("parse: gpu: empty (an index on the node or a GPU UUID)")
    if gpu.isascii() and gpu.isdigit():
        if int(gpu) > GPU_INDEX_MAX:
            raise ValueError(f"gpu: index {int(gpu)} is beyond {GPU_INDEX_MAX}, the highest GPU index on a node")
        gpu = str(int(gpu))
    elif not gpu.startswith(("GPU-", "MIG-")) or len(gpu) > UUID_MAX or not gpu.isprintable():
        raise ValueError(f"gpu: {gpu[:80]!r} is neither an index on the node nor a GPU UUID (GPU-…)")
    gpu_model = cell("gpu_model")
    if len(gpu_model) > 100:
        raise ValueError("gpu_model: longer than 100 characters")
    row = _Row(
        line=line, ts=round(seconds), node=node, gpu=gpu,
        util_gpu=_number(cell("util_gpu"), "util_gpu", float),
        mem_used_mib=_number(cell("mem_used_mib"), "mem_used_mib", int),
        power_w=_number(cell("power_w"), "power_w", float),
        interval_s=_number(cell("interval_s"), "interval_s", int),
        gpu_model=gpu_model,
        gpm={name: value for name in GPM_FIELDS if (value := _number(cell(name), name, float)) is not None},
    )
    shortest, longest = INTERVAL_S_RANGE
    if row.interval_s is not None and not shortest <= row.interval_s <= longest:
        raise ValueError(f"interval_s: not a whole number of seconds in {shortest}..{longest}")
    return row


def _number(text: str, column: str, kind):
    """A cell's number, checked against the ranges ingest enforces (the same messages)."""
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"parse: {column}: {text[:40]!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"parse: {column}: {text[:40]!r} is not a finite number")
    if kind is int:
        if value != int(value):
            raise ValueError(f"parse: {column}: {text[:40]!r} is not a whole number")
        value = int(value)
    low, high = FLOAT_RANGES.get(column) or INT_RANGES.get(column, (None, None))
    if low is not None and value < low:
        raise ValueError(f"{column}: below {low}")
    if high is not None and value > high:
        raise ValueError(f"{column}: above {high}")
    return value


def _resolve_gpus(rows: list[_Row], report: ImportReport, models: GpuModelNames, *, now: datetime) -> list[_Row]:
    """Give each row its GPU's UUID, creating unknown nodes and GPUs; rows naming a GPU that may not be
    created are rejected. Returns the rows to ingest."""
    hostnames = {row.node for row in rows}
    nodes = {n.hostname: n for n in Node.objects.filter(hostname__in=hostnames)}
    in_service = defaultdict(dict)  # hostname → {index: uuid} of its whole GPUs in service
    found = Gpu.objects.filter(node__hostname__in=hostnames, mig_parent__isnull=True,
                               status__in=[GpuStatus.ACTIVE, GpuStatus.MAINTENANCE]).values_list("node__hostname", "index", "uuid")
    for hostname, index, uuid in found:
        in_service[hostname][index] = uuid
    named = {row.gpu for row in rows if not row.gpu.isdigit()} | {
        replay_gpu_uuid(row.node, int(row.gpu)) for row in rows if row.gpu.isdigit()}
    known = dict(Gpu.objects.filter(uuid__in=named).values_list("uuid", "node__hostname"))  # uuid → its node
    known.update((uuid, hostname) for hostname, gpus in in_service.items() for uuid in gpus.values())
    good: list[_Row] = []
    for row in rows:
        node = nodes.get(row.node)
        if row.gpu.isdigit():
            index = int(row.gpu)
            uuid = in_service[row.node].get(index) or replay_gpu_uuid(row.node, index)
            if uuid not in known and node is not None and node.agent_url:
                report.rejected.append((row.line, f"gpu: node {row.node} has no GPU {index} (its agent registers its GPUs)"))
                continue
        else:
            uuid, index = row.gpu, None
            if uuid in known and known[uuid] != row.node:
                report.rejected.append((row.line, f"gpu: {uuid} is on node {known[uuid]}, not {row.node}"))
                continue
            if uuid not in known and node is not None and node.agent_url:
                report.rejected.append((row.line, f"gpu: node {row.node} has no GPU {uuid} (its agent registers its GPUs)"))
                continue
        if uuid not in known:
            if node is None:
                node = nodes[row.node] = Node.objects.create(hostname=row.node, pool="imported")
                node_status_set(node=node, status=node.status, at=now, reason="created by import_samples")
                report.nodes_created.append(row.node)
            model = models.resolve(row.gpu_model or "unknown")
            if index is None:
                index = _next_index(node)
            Gpu.objects.create(node=node, index=index, uuid=uuid, model=model, memory_mib=model.memory_mib)
            in_service[row.node][index] = uuid
            known[uuid] = row.node
            report.gpus_created_names.append(f"{row.node}/{index} ({model.short_name})")
        row.uuid = uuid
        good.append(row)
    return good


def _next_index(node: Node) -> int:
    last = Gpu.objects.filter(node=node, mig_parent__isnull=True).order_by("-index").values_list("index", flat=True).first()
    return 0 if last is None else last + 1


def _json_lines(rows: list[_Row]) -> list[bytes]:
    times = defaultdict(list)
    for row in rows:
        times[row.uuid].append(row.ts)
    inferred = {uuid: median_gap_interval(ts, default=DEFAULT_INTERVAL_S) for uuid, ts in times.items()}
    lines = []
    for row in rows:
        interval = row.interval_s if row.interval_s is not None else inferred[row.uuid]
        record = {
            "line": row.line, "ts": row.ts, "gpu_uuid": row.uuid, "interval_s": interval, "util_gpu": row.util_gpu,
            "mem_used_mib": row.mem_used_mib, "power_w": row.power_w,
            # As the replay backend does: energy of the interval from its mean power.
            "energy_j": round(row.power_w * interval, 3) if row.power_w is not None else None,
            **row.gpm,  # a field left out is stored null
        }
        lines.append(json.dumps(record, separators=(",", ":")).encode() + b"\n")
    return lines


def _complete_unagented_nodes(rows: list[_Row]) -> None:
    """A node that no agent is collected from has its data complete as far as its imports reach (the
    report's ``data_complete_to``); a collected node's watermark stays the collector's."""
    newest: dict[str, int] = {}
    for row in rows:
        newest[row.node] = max(newest.get(row.node, row.ts), row.ts)
    for node in Node.objects.filter(hostname__in=newest, agent_url=""):
        reach = datetime.fromtimestamp(newest[node.hostname], UTC)
        state, created = CollectionState.objects.get_or_create(node=node, defaults={"data_complete_to": reach})
        if not created and (state.data_complete_to is None or state.data_complete_to < reach):
            CollectionState.objects.filter(pk=node.pk).update(data_complete_to=reach)

"""Minute and hour rollups of sample records, in plain Python: the reference the SQL must match.

``cluster/telemetry/rollups.py`` maintains the rollup tables with set-based SQL; this module says what those rows
must contain, on simple records, so the rules can be property-tested without a database
(DESIGN.md §3, §7). Times are whole epoch seconds (UTC); buckets are ``[start, start + bucket_s)``.

The rules, shared with the SQL:

- **Coverage.** A record with end ``ts`` and ``interval_s`` covers the seconds ``[ts - interval_s, ts)``
  (the interval ``(ts - interval_s, ts]`` of DESIGN.md §3 has the same seconds; the half-open form
  makes "which bucket holds this second" unambiguous).
- **Each second counts once.** Records of one GPU should not overlap, but imported data can. Every
  second of a GPU's timeline is *owned* by at most one record: taking the records in order of
  (start, end), a record owns the part of its interval that no earlier record covered. So
  ``covered_s`` is the length of the union of the records' intervals within the bucket, never more
  than the bucket; means and energy use owned seconds only. Ownership does not depend on the bucket
  size, which is what makes hours built from minutes equal hours built from raw.
- **Weighted fields.** ``util_mean``, ``util_mem_mean``, ``power_mean_w`` and the GPM means
  (``<field>_mean`` of each of ``agents.records.GPM_FIELDS``: ``sm_active_mean`` … ``pcie_tx_mibs_mean``)
  are means over the seconds owned by records that have the field (null when there are none);
  ``util_covered_s`` is the seconds owned by records with a ``util_gpu``, ``gpm_covered_s`` those owned
  by records with an ``sm_active``. ``energy_j`` is each record's energy times
  owned seconds / ``interval_s`` (null when no record with energy owns a second of the bucket).
- **Max fields** (``util_max``: ``util_gpu_max``, else ``util_gpu``; ``mem_used_max_mib``,
  ``temp_max_c``) and ``sample_count`` take every record overlapping the bucket, owner or not.
- **Events.** ``xid_count`` and ``ecc_dbe_count`` count once, in the bucket holding the record's last
  second ``ts - 1`` (the bucket ``b`` with ``b < ts <= b + bucket_s``), so they are never split.

**Hours from minutes** (:func:`hour_rollups_from_minutes`): seconds, energy and events are sums, max
fields are maxima, ``util_mean`` is weighted by ``util_covered_s`` and the GPM means by ``gpm_covered_s``. Compared with an hour computed
from raw records (:func:`bucket_rollups` with 3600 s), these are equal in general, up to float
rounding. Two are not, because a minute row does not keep what they would need:

- ``sample_count`` is the sum of the minutes' counts, so a record that straddles a minute boundary
  (57 s or 300 s data) counts once per minute it overlaps. It equals the raw hour count when no
  record straddles a minute (10 s, 20 s, 30 s, 60 s aligned data).
- ``util_mem_mean`` and ``power_mean_w`` are weighted by :func:`aux_weight_s` (``util_covered_s``, or
  ``covered_s`` for a minute with no utilization), which is exact when, within each minute, the field
  is known on exactly the records that have a utilization (they come from the same NVML reads; a
  failed read loses all of them) or, on a GPU that never reports utilization (MIG), on all records.
- the GPM means are weighted by ``gpm_covered_s``, which is exact when, within each minute, the field
  is known on exactly the records that have an ``sm_active``, or on none of them (the minute then has
  no mean for it and weighs nothing). The GPM fields of one record come from the same pair of GPM
  samples, so they are known together (a device without GPM, the agent's first interval, a refused
  GPM read lose all of them), except when one metric's own return code failed: a minute where that
  metric is known on some of its ``sm_active`` records but not all weighs its mean by seconds that
  include the ones without it. A minute with no ``sm_active`` at all (``gpm_covered_s`` 0) gives its
  hour none of its other GPM means.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from agents.records import GPM_FIELDS

MINUTE_S = 60
HOUR_S = 3600
GPM_COVERAGE_FIELD = "sm_active"  # the GPM field whose owned seconds are gpm_covered_s
GPM_MEANS = tuple(f"{name}_mean" for name in GPM_FIELDS)  # the rollup column of each GPM field

BucketKey = tuple[int, int]  # (gpu_id, bucket start in epoch seconds)


@dataclass(frozen=True, slots=True)
class SampleRecord:
    """One sample row as the rollups see it: the interval ``[ts - interval_s, ts)`` of one GPU."""

    gpu_id: int
    ts: int
    interval_s: int
    util_gpu: float | None = None
    util_gpu_max: float | None = None
    util_mem: float | None = None
    mem_used_mib: int | None = None
    power_w: float | None = None
    energy_j: float | None = None
    temp_c: int | None = None
    xid_count: int | None = None
    ecc_dbe_count: int | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    fp16_active: float | None = None
    fp32_active: float | None = None
    fp64_active: float | None = None
    nvlink_rx_mibs: float | None = None
    nvlink_tx_mibs: float | None = None
    pcie_rx_mibs: float | None = None
    pcie_tx_mibs: float | None = None

    @property
    def start(self) -> int:
        return self.ts - self.interval_s


@dataclass(frozen=True, slots=True)
class RollupValues:
    """One bucket's rollup, field for field the columns of ``MinuteRollup`` and ``HourRollup``."""

    covered_s: int
    util_covered_s: int
    sample_count: int
    util_mean: float | None = None
    util_max: float | None = None
    util_mem_mean: float | None = None
    mem_used_max_mib: int | None = None
    power_mean_w: float | None = None
    energy_j: float | None = None
    temp_max_c: int | None = None
    xid_count: int = 0
    ecc_dbe_count: int = 0
    gpm_covered_s: int = 0
    sm_active_mean: float | None = None
    sm_occupancy_mean: float | None = None
    tensor_active_mean: float | None = None
    dram_active_mean: float | None = None
    fp16_active_mean: float | None = None
    fp32_active_mean: float | None = None
    fp64_active_mean: float | None = None
    nvlink_rx_mibs_mean: float | None = None
    nvlink_tx_mibs_mean: float | None = None
    pcie_rx_mibs_mean: float | None = None
    pcie_tx_mibs_mean: float | None = None


def floor_to(epoch_s: int, bucket_s: int) -> int:
    """Start of the bucket of length ``bucket_s`` holding the second ``epoch_s``."""
    return epoch_s - epoch_s % bucket_s


def buckets_overlapped(start: int, end: int, bucket_s: int) -> range:
    """Starts of the buckets that the seconds ``[start, end)`` touch (empty when ``end <= start``)."""
    if end <= start:
        return range(0)
    return range(floor_to(start, bucket_s), floor_to(end - 1, bucket_s) + 1, bucket_s)


def overlap_s(start: int, end: int, bucket: int, bucket_s: int) -> int:
    """Seconds of ``[start, end)`` inside the bucket ``[bucket, bucket + bucket_s)``."""
    return max(0, min(end, bucket + bucket_s) - max(start, bucket))


def owned_spans(records: Iterable[SampleRecord]) -> Iterator[tuple[SampleRecord, int, int]]:
    """Each record with the seconds ``[own_start, ts)`` it owns (empty when ``own_start >= ts``).

    Records are taken per GPU in (start, end) order; a record owns what no earlier one covered, so the
    owned spans are disjoint and together cover exactly the union of the records' intervals."""
    covered_to: dict[int, int] = {}
    for record in sorted(records, key=lambda r: (r.gpu_id, r.start, r.ts)):
        own_start = max(record.start, covered_to.get(record.gpu_id, record.start))
        covered_to[record.gpu_id] = max(record.ts, covered_to.get(record.gpu_id, record.ts))
        yield record, own_start, record.ts


@dataclass(slots=True)
class _Weighted:
    """A running overlap-weighted mean: Σ value × seconds and Σ seconds."""

    total: float = 0.0
    seconds: int = 0

    def add(self, value: float | None, seconds: float) -> None:
        if value is not None and seconds > 0:
            self.total += value * seconds
            self.seconds += seconds

    def mean(self) -> float | None:
        return self.total / self.seconds if self.seconds else None


def _max(current, value):
    if value is None:
        return current
    return value if current is None else max(current, value)


def _gpm_weights() -> dict[str, _Weighted]:
    return {name: _Weighted() for name in GPM_FIELDS}


def _gpm_means(gpm: Mapping[str, _Weighted]) -> dict[str, float | None]:
    return {f"{name}_mean": weighted.mean() for name, weighted in gpm.items()}


def _add(current: float | None, value: float | None) -> float | None:
    if value is None:
        return current
    return value if current is None else current + value


@dataclass(slots=True)
class _Bucket:
    """What one bucket has gathered so far, from raw records."""

    covered_s: int = 0
    sample_count: int = 0
    util: _Weighted = field(default_factory=_Weighted)
    util_mem: _Weighted = field(default_factory=_Weighted)
    power: _Weighted = field(default_factory=_Weighted)
    gpm: dict[str, _Weighted] = field(default_factory=_gpm_weights)
    energy_j: float | None = None
    util_max: float | None = None
    mem_used_max_mib: int | None = None
    temp_max_c: int | None = None
    xid_count: int = 0
    ecc_dbe_count: int = 0

    def add_overlap(self, record: SampleRecord) -> None:
        """Fold in the fields every overlapping record contributes to, owner or not."""
        self.sample_count += 1
        util_max = record.util_gpu_max if record.util_gpu_max is not None else record.util_gpu
        self.util_max = _max(self.util_max, util_max)
        self.mem_used_max_mib = _max(self.mem_used_max_mib, record.mem_used_mib)
        self.temp_max_c = _max(self.temp_max_c, record.temp_c)

    def add_owned(self, record: SampleRecord, seconds: int) -> None:
        """Fold in ``seconds`` this record owns inside the bucket."""
        if seconds <= 0:
            return
        self.covered_s += seconds
        self.util.add(record.util_gpu, seconds)
        self.util_mem.add(record.util_mem, seconds)
        self.power.add(record.power_w, seconds)
        for name, weighted in self.gpm.items():
            weighted.add(getattr(record, name), seconds)
        if record.energy_j is not None:
            self.energy_j = _add(self.energy_j, record.energy_j * seconds / record.interval_s)

    def add_events(self, record: SampleRecord) -> None:
        self.xid_count += record.xid_count or 0
        self.ecc_dbe_count += record.ecc_dbe_count or 0

    def values(self) -> RollupValues:
        return RollupValues(
            covered_s=self.covered_s, util_covered_s=self.util.seconds, sample_count=self.sample_count,
            util_mean=self.util.mean(), util_max=self.util_max, util_mem_mean=self.util_mem.mean(),
            mem_used_max_mib=self.mem_used_max_mib, power_mean_w=self.power.mean(), energy_j=self.energy_j,
            temp_max_c=self.temp_max_c, xid_count=self.xid_count, ecc_dbe_count=self.ecc_dbe_count,
            gpm_covered_s=self.gpm[GPM_COVERAGE_FIELD].seconds, **_gpm_means(self.gpm),
        )


def bucket_rollups(records: Iterable[SampleRecord], *, bucket_s: int) -> dict[BucketKey, RollupValues]:
    """Rollups straight from raw records for every (GPU, bucket) that some record overlaps."""
    buckets: dict[BucketKey, _Bucket] = defaultdict(_Bucket)
    for record, own_start, own_end in owned_spans(records):
        event_bucket = floor_to(record.ts - 1, bucket_s)
        for bucket in buckets_overlapped(record.start, record.ts, bucket_s):
            acc = buckets[record.gpu_id, bucket]
            acc.add_overlap(record)
            acc.add_owned(record, overlap_s(own_start, own_end, bucket, bucket_s))
            if bucket == event_bucket:
                acc.add_events(record)
    return {key: acc.values() for key, acc in buckets.items()}


def minute_rollups(records: Iterable[SampleRecord]) -> dict[BucketKey, RollupValues]:
    """Minute rollups from raw records, keyed (gpu_id, minute start epoch)."""
    return bucket_rollups(records, bucket_s=MINUTE_S)


def aux_weight_s(values: RollupValues) -> int:
    """Seconds a minute's ``util_mem_mean`` and ``power_mean_w`` weigh in its hour (see module doc)."""
    return values.util_covered_s if values.util_covered_s > 0 else values.covered_s


def combine(parts: Iterable[RollupValues]) -> RollupValues:
    """One rollup from the rollups of the smaller buckets that tile it (minutes → hour)."""
    util, util_mem, power, gpm = _Weighted(), _Weighted(), _Weighted(), _gpm_weights()
    covered_s = sample_count = xid_count = ecc_dbe_count = gpm_covered_s = 0
    energy_j = util_max = mem_used_max_mib = temp_max_c = None
    for part in parts:
        covered_s += part.covered_s
        sample_count += part.sample_count
        xid_count += part.xid_count
        ecc_dbe_count += part.ecc_dbe_count
        util.add(part.util_mean, part.util_covered_s)
        util_mem.add(part.util_mem_mean, aux_weight_s(part))
        power.add(part.power_mean_w, aux_weight_s(part))
        gpm_covered_s += part.gpm_covered_s
        for name, weighted in gpm.items():
            weighted.add(getattr(part, f"{name}_mean"), part.gpm_covered_s)
        energy_j = _add(energy_j, part.energy_j)
        util_max = _max(util_max, part.util_max)
        mem_used_max_mib = _max(mem_used_max_mib, part.mem_used_max_mib)
        temp_max_c = _max(temp_max_c, part.temp_max_c)
    return RollupValues(
        covered_s=covered_s, util_covered_s=util.seconds, sample_count=sample_count,
        util_mean=util.mean(), util_max=util_max, util_mem_mean=util_mem.mean(),
        mem_used_max_mib=mem_used_max_mib, power_mean_w=power.mean(), energy_j=energy_j,
        temp_max_c=temp_max_c, xid_count=xid_count, ecc_dbe_count=ecc_dbe_count,
        gpm_covered_s=gpm_covered_s, **_gpm_means(gpm),
    )


def hour_rollups_from_minutes(minutes: Mapping[BucketKey, RollupValues]) -> dict[BucketKey, RollupValues]:
    """Hour rollups from minute rollups, keyed (gpu_id, hour start epoch)."""
    by_hour: dict[BucketKey, list[RollupValues]] = defaultdict(list)
    for (gpu_id, minute), values in sorted(minutes.items()):
        by_hour[gpu_id, floor_to(minute, HOUR_S)].append(values)
    return {key: combine(parts) for key, parts in by_hour.items()}

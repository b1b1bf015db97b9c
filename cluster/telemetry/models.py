"""Raw samples, their minute and hour rollups, and what the collector knows of each node's agent."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Abs
from django.db.models.lookups import GreaterThan
from django.utils.translation import gettext_lazy as _

from cluster.inventory.models import Gpu, Node


class Sample(models.Model):
    """One GPU's measurements for one agent interval ``(ts - interval_s, ts]`` (DESIGN.md §3).

    Written only by the collector's COPY + ``INSERT … ON CONFLICT DO NOTHING`` path, never through
    the ORM; kept ``TELEMETRY_RAW_RETENTION_DAYS`` days. The table is partitioned by UTC day of ``ts``
    (migration 0013, ``cluster.telemetry.partitions``): still managed here, since columns, checks and
    indexes added to the parent reach every partition, and retention drops whole days."""

    pk = models.CompositePrimaryKey("gpu", "ts")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, db_index=False, related_name="+")
    ts = models.DateTimeField(_("interval end"))
    interval_s = models.PositiveIntegerField(_("interval (s)"))
    util_gpu = models.FloatField(null=True)
    util_gpu_max = models.FloatField(null=True)
    util_mem = models.FloatField(null=True)
    mem_used_mib = models.IntegerField(null=True)
    mem_total_mib = models.IntegerField(null=True)
    power_w = models.FloatField(null=True)
    energy_j = models.FloatField(null=True)
    temp_c = models.SmallIntegerField(null=True)
    sm_clock_mhz = models.IntegerField(null=True)
    xid_count = models.IntegerField(null=True)
    ecc_dbe_count = models.IntegerField(null=True)
    processes = models.JSONField(null=True)
    # NVML GPM (agents/records.py GPM_FIELDS): percent 0–100, then MiB/s; null where the device has none.
    # Added after the table grew, nullable with no default: adding them rewrites nothing.
    sm_active = models.FloatField(null=True)
    sm_occupancy = models.FloatField(null=True)
    tensor_active = models.FloatField(null=True)
    dram_active = models.FloatField(null=True)
    fp16_active = models.FloatField(null=True)
    fp32_active = models.FloatField(null=True)
    fp64_active = models.FloatField(null=True)
    nvlink_rx_mibs = models.FloatField(null=True)
    nvlink_tx_mibs = models.FloatField(null=True)
    pcie_rx_mibs = models.FloatField(null=True)
    pcie_tx_mibs = models.FloatField(null=True)

    class Meta:
        verbose_name = _("sample")
        verbose_name_plural = _("samples")
        constraints = [
            models.CheckConstraint(condition=models.Q(interval_s__gte=1, interval_s__lte=3600), name="sample_interval"),
            models.CheckConstraint(
                condition=models.Q(util_gpu__isnull=True) | models.Q(util_gpu__gte=0, util_gpu__lte=100),
                name="sample_util_range",
            ),
        ]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class RollupFields(models.Model):
    """Overlap-weighted aggregates of the samples that cover a bucket (DESIGN.md §3)."""

    util_mean = models.FloatField(null=True, help_text=_("Mean utilization (percent) over the seconds that have a utilization."))
    util_max = models.FloatField(null=True)
    util_mem_mean = models.FloatField(null=True)
    mem_used_max_mib = models.IntegerField(null=True)
    power_mean_w = models.FloatField(null=True)
    energy_j = models.FloatField(null=True, help_text=_("Energy, each record's share by overlap."))
    temp_max_c = models.SmallIntegerField(null=True)
    xid_count = models.IntegerField(default=0)
    ecc_dbe_count = models.IntegerField(default=0)
    covered_s = models.IntegerField(help_text=_("Seconds of the bucket covered by any record."))
    util_covered_s = models.IntegerField(help_text=_("Seconds covered by records with a utilization."))
    sample_count = models.IntegerField(help_text=_("Records overlapping the bucket."))
    # Means of the NVML GPM fields, each over the seconds owned by records that have it (rollup_math).
    sm_active_mean = models.FloatField(null=True, help_text=_("Mean SM activity (percent)."))
    sm_occupancy_mean = models.FloatField(null=True, help_text=_("Mean SM occupancy (percent)."))
    tensor_active_mean = models.FloatField(null=True, help_text=_("Mean tensor pipe activity (percent)."))
    dram_active_mean = models.FloatField(null=True, help_text=_("Mean DRAM bandwidth used (percent of peak)."))
    fp16_active_mean = models.FloatField(null=True, help_text=_("Mean FP16 pipe activity (percent)."))
    fp32_active_mean = models.FloatField(null=True, help_text=_("Mean FP32 pipe activity (percent)."))
    fp64_active_mean = models.FloatField(null=True, help_text=_("Mean FP64 pipe activity (percent)."))
    nvlink_rx_mibs_mean = models.FloatField(null=True, help_text=_("Mean NVLink received (MiB/s)."))
    nvlink_tx_mibs_mean = models.FloatField(null=True, help_text=_("Mean NVLink sent (MiB/s)."))
    pcie_rx_mibs_mean = models.FloatField(null=True, help_text=_("Mean PCIe received (MiB/s)."))
    pcie_tx_mibs_mean = models.FloatField(null=True, help_text=_("Mean PCIe sent (MiB/s)."))
    # A database default too, so rows written in raw SQL without it (bench, demo) still insert.
    gpm_covered_s = models.IntegerField(
        default=0, db_default=0, help_text=_("Seconds covered by records with an SM activity (GPM)."),
    )

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} @ {self.bucket:%Y-%m-%d %H:%M}"


class MinuteRollup(RollupFields):
    """One GPU's telemetry for one UTC minute; coverage = covered_s / 60."""

    pk = models.CompositePrimaryKey("gpu", "bucket")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, db_index=False, related_name="+")
    bucket = models.DateTimeField(_("minute start"))

    BUCKET_S = 60

    class Meta:
        verbose_name = _("minute rollup")
        verbose_name_plural = _("minute rollups")
        indexes = [models.Index(fields=["bucket"], name="minuterollup_bucket")]


class HourRollup(RollupFields):
    """One GPU's telemetry for one UTC hour, from its minute rollups; coverage = covered_s / 3600."""

    pk = models.CompositePrimaryKey("gpu", "bucket")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, db_index=False, related_name="+")
    bucket = models.DateTimeField(_("hour start"))
    # The hour's lowest minute and how many of its minutes have a utilization: the board's "always full"
    # (boards/movers.py) reads a day of them, not its 1,440 minutes per GPU. Null in hours rolled up before
    # they were added (issue 18): the board reads those hours' minutes instead.
    util_min_minute = models.FloatField(null=True, help_text=_("Lowest mean utilization of a minute with one."))
    util_minutes = models.SmallIntegerField(null=True, help_text=_("Minutes with a utilization."))

    BUCKET_S = 3600

    class Meta:
        verbose_name = _("hour rollup")
        verbose_name_plural = _("hour rollups")
        indexes = [models.Index(fields=["bucket"], name="hourrollup_bucket")]


class RollupLevel(models.TextChoices):
    MINUTE = "minute", _("Minute")
    HOUR = "hour", _("Hour")


class DirtyBucket(models.Model):
    """A bucket whose rollup must be (re)computed because records covering it were stored."""

    pk = models.CompositePrimaryKey("level", "gpu", "bucket")
    level = models.CharField(max_length=8, choices=RollupLevel.choices)
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, db_index=False, related_name="+")
    bucket = models.DateTimeField()

    class Meta:
        verbose_name = _("dirty rollup bucket")
        verbose_name_plural = _("dirty rollup buckets")

    def __str__(self) -> str:
        return f"{self.level} gpu {self.gpu_id} @ {self.bucket:%Y-%m-%d %H:%M}"


def clock_skewed(skew_s: float | None) -> bool:
    """Whether an agent's clock (its last answer's time minus the server's) is off by more than
    TELEMETRY_MAX_CLOCK_SKEW_S, ahead or behind: its node is flagged (the collector's node_clock_skew alert)."""
    return skew_s is not None and abs(skew_s) > settings.TELEMETRY_MAX_CLOCK_SKEW_S


def clock_skewed_annotation() -> GreaterThan:
    """:func:`clock_skewed` as an annotation on nodes (``Node.objects.annotate(clock_skewed=…)``; NULL: the
    collector never heard the agent's clock)."""
    return GreaterThan(Abs(models.F("collection__clock_skew_s")), settings.TELEMETRY_MAX_CLOCK_SKEW_S)


class CollectionState(models.Model):
    """What the collector knows of a node's agent: spool, cursor, health counters."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, primary_key=True, related_name="collection")
    spool_id = models.CharField(_("spool id"), max_length=64, blank=True)
    cursor = models.BigIntegerField(_("cursor"), default=0, help_text=_("Last spool seq stored."))
    last_attempt_at = models.DateTimeField(_("last attempt"), null=True, blank=True)
    last_success_at = models.DateTimeField(_("last successful collection"), null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(_("last error"), blank=True)
    data_complete_to = models.DateTimeField(
        _("data complete to"), null=True, blank=True,
        help_text=_("The newest record time the agent had spooled when last collected in full."),
    )
    lag_s = models.FloatField(_("lag (s)"), null=True, blank=True, help_text=_("Collection time minus newest record."))
    clock_skew_s = models.FloatField(_("clock skew (s)"), null=True, blank=True, help_text=_("Agent clock minus server clock."))
    records_stored = models.BigIntegerField(default=0)
    records_rejected = models.BigIntegerField(default=0)
    rejected_by_reason = models.JSONField(default=dict, blank=True)
    agent_dropped_total = models.BigIntegerField(default=0, help_text=_("Records the agent's spool dropped when full."))
    agent_version = models.CharField(max_length=32, blank=True)
    driver_version = models.CharField(max_length=32, blank=True)
    inventory_refreshed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("collection state")
        verbose_name_plural = _("collection states")

    def __str__(self) -> str:
        return f"{self.node} @ {self.spool_id}:{self.cursor}"

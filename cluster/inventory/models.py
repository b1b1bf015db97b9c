from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models.functions import Lower
from django.utils.translation import gettext_lazy as _

from cluster.choices import GpuStatus, NodeStatus
from core.crypto import EncryptedTextField
from core.units import WHOLE_GPU_SHARE, fraction_from_share

hostname_validator = RegexValidator(
    r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$",
    _("A hostname is dot-separated labels of letters, digits and '-' (RFC 1123)."),
)


class GpuModel(models.Model):
    """A kind of GPU as NVML names it (``NVIDIA H200``), with its memory and a short display name."""

    name = models.CharField(_("NVML name"), max_length=100, unique=True)
    short_name = models.CharField(_("short name"), max_length=32, unique=True)
    memory_mib = models.PositiveIntegerField(_("memory (MiB)"))

    class Meta:
        ordering = ["short_name"]
        verbose_name = _("GPU model")
        verbose_name_plural = _("GPU models")

    def __str__(self) -> str:
        return self.short_name

    @property
    def memory_gib(self) -> int:
        return round(self.memory_mib / 1024)


class GpuModelAlias(models.Model):
    """Another name for a GPU model, as a scheduler or file writes it (Slurm GRES type ``a100_80`` →
    ``NVIDIA A100-SXM4-80GB``); matched without regard to case."""

    alias = models.CharField(
        _("alias"), max_length=100, unique=True,
        help_text=_("The name as it appears in files, e.g. a Slurm GRES type (a100_80); stored in lower case."),
    )
    model = models.ForeignKey(GpuModel, on_delete=models.CASCADE, related_name="aliases", verbose_name=_("GPU model"))

    class Meta:
        ordering = ["alias"]
        verbose_name = _("GPU model alias")
        verbose_name_plural = _("GPU model aliases")
        constraints = [
            models.CheckConstraint(condition=models.Q(alias=Lower("alias")), name="gpu_model_alias_lower"),
        ]

    def __str__(self) -> str:
        return f"{self.alias} → {self.model_id and self.model.short_name}"

    def save(self, *args, **kwargs):
        self.alias = self.alias.strip().lower()
        super().save(*args, **kwargs)


class NodeQuerySet(models.QuerySet):
    def with_gpu_counts(self) -> NodeQuerySet:
        whole = models.Q(gpus__mig_parent__isnull=True) & ~models.Q(gpus__status=GpuStatus.RETIRED)
        return self.annotate(gpu_count=models.Count("gpus", filter=whole))

    def pools(self) -> list[str]:
        return list(self.order_by("pool").values_list("pool", flat=True).distinct())


class Node(models.Model):
    """A GPU machine running the Cardhour agent, which the server pulls samples from."""

    hostname = models.CharField(_("hostname"), max_length=253, unique=True, validators=[hostname_validator])
    pool = models.SlugField(_("pool"), max_length=50, default="default", help_text=_("Partition or node pool."))
    labels = models.JSONField(_("labels"), default=dict, blank=True, help_text=_("Free-form key/value labels."))
    agent_url = models.URLField(_("agent URL"), max_length=300, blank=True, help_text=_("e.g. http://gpu01:9400"))
    agent_token = EncryptedTextField(
        _("agent token"), blank=True,
        help_text=_("Bearer token the server presents to the agent; stored encrypted."),
    )
    status = models.CharField(_("status"), max_length=16, choices=NodeStatus.choices, default=NodeStatus.UP)
    last_seen_at = models.DateTimeField(_("last seen"), null=True, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["hostname"]
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        indexes = [models.Index(fields=["pool", "hostname"])]
        constraints = [
            models.CheckConstraint(condition=models.Q(status__in=NodeStatus.values), name="node_known_status"),
        ]

    def __str__(self) -> str:
        return self.hostname

    @property
    def status_colour(self) -> str:
        return NodeStatus(self.status).colour


class Gpu(models.Model):
    """One GPU (or one MIG instance of a GPU) on a node, known by its NVML UUID."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="gpus", verbose_name=_("node"))
    index = models.PositiveSmallIntegerField(_("index"), help_text=_("NVML index on the node."))
    uuid = models.CharField(_("UUID"), max_length=100, unique=True)
    model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="gpus", verbose_name=_("model"))
    memory_mib = models.PositiveIntegerField(_("memory (MiB)"))
    status = models.CharField(_("status"), max_length=16, choices=GpuStatus.choices, default=GpuStatus.ACTIVE)
    mig_parent = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="mig_instances",
        verbose_name=_("MIG parent"),
    )
    mig_profile = models.CharField(_("MIG profile"), max_length=32, blank=True, help_text=_("e.g. 1g.18gb"))
    share = models.PositiveIntegerField(
        _("share"), default=WHOLE_GPU_SHARE,
        validators=[MinValueValidator(1), MaxValueValidator(WHOLE_GPU_SHARE)],
        help_text=_("Fraction of a GPU in 1/840,000 (840,000 = a whole GPU; a 1g slice of 7 = 120,000)."),
    )
    pci_bus_id = models.CharField(_("PCI bus id"), max_length=32, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["node__hostname", "index", "mig_profile", "uuid"]
        verbose_name = _("GPU")
        verbose_name_plural = _("GPUs")
        constraints = [
            models.UniqueConstraint(
                fields=["node", "index"],
                condition=models.Q(mig_parent__isnull=True, status__in=["active", "maintenance"]),
                name="gpu_unique_index_per_node",
            ),
            models.CheckConstraint(
                condition=models.Q(share__gte=1, share__lte=WHOLE_GPU_SHARE), name="gpu_share_within_one_gpu"
            ),
            models.CheckConstraint(
                condition=models.Q(mig_parent__isnull=False) | models.Q(share=WHOLE_GPU_SHARE),
                name="gpu_whole_unless_mig",
            ),
            models.CheckConstraint(condition=models.Q(status__in=GpuStatus.values), name="gpu_known_status"),
        ]

    def __str__(self) -> str:
        if self.mig_parent_id:
            return f"{self.node.hostname}/{self.index} MIG {self.mig_profile}"
        return f"{self.node.hostname}/{self.index}"

    @property
    def fraction(self):
        return fraction_from_share(self.share)

    @property
    def status_colour(self) -> str:
        return GpuStatus(self.status).colour

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cluster.models import Gpu, GpuModel, Node
from core.api import JsonText
from core.units import WHOLE_GPU_SHARE


class GpuModelSerializer(JsonText, serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = ["id", "name", "short_name", "memory_mib"]


class GpuSerializer(JsonText, serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="hostname", queryset=Node.objects.all())
    model = serializers.SlugRelatedField(slug_field="short_name", queryset=GpuModel.objects.all())
    mig_parent = serializers.SlugRelatedField(
        slug_field="uuid", queryset=Gpu.objects.filter(mig_parent__isnull=True), required=False, allow_null=True
    )
    fraction = serializers.SerializerMethodField(help_text=_("Share of a whole GPU, as a fraction string (e.g. '1/7')."))

    class Meta:
        model = Gpu
        fields = [
            "id", "node", "index", "uuid", "model", "memory_mib", "status",
            "mig_parent", "mig_profile", "share", "fraction", "pci_bus_id",
        ]
        # (node, index) is unique among whole GPUs only; checked in validate() since DRF's generated
        # validator would make mig_parent a required field.
        validators = []

    def get_fraction(self, gpu) -> str:
        return str(gpu.fraction)

    def validate(self, attrs):
        mig_parent = attrs.get("mig_parent", getattr(self.instance, "mig_parent", None))
        share = attrs.get("share", getattr(self.instance, "share", WHOLE_GPU_SHARE))
        if mig_parent is None and share != WHOLE_GPU_SHARE:
            raise serializers.ValidationError(
                {"share": _("Only a MIG instance (with mig_parent) may hold less than a whole GPU (840000).")}
            )
        node = attrs.get("node", getattr(self.instance, "node", None))
        if mig_parent is not None and node is not None and mig_parent.node_id != node.pk:
            raise serializers.ValidationError({"mig_parent": _("A MIG instance must be on its parent GPU's node.")})
        index = attrs.get("index", getattr(self.instance, "index", None))
        if mig_parent is None and node is not None:
            clash = Gpu.objects.filter(node=node, index=index, mig_parent__isnull=True, status__in=["active", "maintenance"])
            if self.instance is not None:
                clash = clash.exclude(pk=self.instance.pk)
            if clash.exists():
                raise serializers.ValidationError({"index": _("Node %(node)s already has a GPU %(index)s.") % {
                    "node": node.hostname, "index": index}})
        return attrs


class NodeGpuSerializer(serializers.ModelSerializer):
    model = serializers.CharField(source="model.short_name", read_only=True)

    class Meta:
        model = Gpu
        fields = ["id", "index", "uuid", "model", "memory_mib", "status"]


@extend_schema_field({"type": "object", "additionalProperties": {
    "oneOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}})
class LabelsField(serializers.JSONField):
    """A node's labels: an object of names to scalar values (not any JSON, as drf-spectacular says of a JSONField)."""


class NodeSerializer(JsonText, serializers.ModelSerializer):
    gpus = NodeGpuSerializer(source="whole_gpus", many=True, read_only=True)
    labels = LabelsField(required=False, help_text=_("Free-form key/value labels."))
    agent_token = serializers.CharField(
        write_only=True, required=False, allow_blank=True, min_length=16, max_length=512,
        style={"input_type": "password"},
        help_text=_("Bearer token for the node's agent. Write-only: stored encrypted, never returned."),
    )
    has_agent_token = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "id", "hostname", "pool", "labels", "agent_url", "agent_token", "has_agent_token",
            "status", "last_seen_at", "gpus",
        ]
        read_only_fields = ["last_seen_at"]

    def get_has_agent_token(self, node) -> bool:
        return bool(node.agent_token)

    def validate_labels(self, labels):
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in labels.items()
        ):
            raise serializers.ValidationError(_("Labels must be an object of string keys to scalar values."))
        return labels


class AgentTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text=_("The new agent token. Shown once; the server keeps it encrypted."))
    agent_config_line = serializers.CharField(help_text=_("The token_sha256 line for the agent's config."))


def find_gpu_model(name: str) -> GpuModel | None:
    """A GPU model by short name ("H200") or NVML name ("NVIDIA H200")."""
    return GpuModel.objects.filter(short_name=name).first() or GpuModel.objects.filter(name=name).first()


class InventoryNameFields:
    """``validate_gpu_model`` and ``validate_node`` for write serializers that name a GPU model (short or
    NVML name) and a node (hostname); an empty value is None, an unknown one a 400 naming it."""

    def validate_gpu_model(self, name):
        if not name:
            return None
        model = find_gpu_model(name)
        if model is None:
            raise serializers.ValidationError(_("Unknown GPU model “%(name)s”.") % {"name": name})
        return model

    def validate_node(self, hostname):
        if not hostname:
            return None
        node = Node.objects.filter(hostname=hostname).first()
        if node is None:
            raise serializers.ValidationError(_("Unknown node “%(node)s”.") % {"node": hostname})
        return node

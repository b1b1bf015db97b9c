from rest_framework import viewsets
from rest_framework.exceptions import ValidationError

from cluster.api.serializers import GpuModelSerializer, GpuSerializer, NodeSerializer
from cluster.filters import NodeFilterForm, nodes_with_gpus
from cluster.models import Gpu, GpuModel
from config.api import ReadAllWriteAdmin, form_errors


class GpuModelViewSet(viewsets.ModelViewSet):
    """GPU models: readable by every role, writable by admins."""

    serializer_class = GpuModelSerializer
    permission_classes = [ReadAllWriteAdmin]
    queryset = GpuModel.objects.all()


class NodeViewSet(viewsets.ModelViewSet):
    """Nodes with their GPUs. Filters: ``pool``, ``model`` (short name), ``status``."""

    serializer_class = NodeSerializer
    permission_classes = [ReadAllWriteAdmin]
    lookup_field = "hostname"
    lookup_value_regex = r"[A-Za-z0-9.-]+"

    def get_queryset(self):
        queryset = nodes_with_gpus()
        if self.action != "list":
            return queryset
        form = NodeFilterForm(self.request.query_params)
        if not form.is_valid():
            raise ValidationError(form_errors(form))
        return form.filter(queryset)

    def perform_create(self, serializer):
        serializer.save()
        serializer.instance.whole_gpus = []


class GpuViewSet(viewsets.ModelViewSet):
    """GPUs and MIG instances: readable by every role, writable by admins."""

    serializer_class = GpuSerializer
    permission_classes = [ReadAllWriteAdmin]
    queryset = Gpu.objects.select_related("node", "model", "mig_parent")

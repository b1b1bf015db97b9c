from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from cluster.inventory.filters import NodeFilterForm, nodes_with_gpus
from cluster.inventory.serializers import (
    AgentTokenSerializer,
    GpuModelSerializer,
    GpuSerializer,
    NodeSerializer,
)
from cluster.inventory.services import agent_config_line, node_token_record, node_token_rotate
from cluster.models import Gpu, GpuModel, Node
from cluster.status.services import node_status_set
from core.api import form_errors
from teams.permissions import ReadAllWriteAdmin


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

    @transaction.atomic
    def perform_create(self, serializer):
        node = serializer.save()
        node_status_set(node=node, status=node.status, reason="registered")
        node_token_record(user=self.request.user, node=node, before="")
        node.whole_gpus = []

    @transaction.atomic
    def perform_update(self, serializer):
        before, token_before = serializer.instance.status, serializer.instance.agent_token
        node = serializer.save()
        node_token_record(user=self.request.user, node=node, before=token_before)
        if node.status != before:
            Node.objects.filter(pk=node.pk).update(status=before)  # the history service makes the change
            node_status_set(node=node, status=node.status, reason=f"set by {self.request.user.get_username()}")

    @extend_schema(request=None, responses={200: AgentTokenSerializer})
    @action(detail=True, methods=["post"], url_path="rotate-token")
    def rotate_token(self, request, hostname=None, format=None):
        """Issue a new agent token (admins). Returned once, with the line for the agent's config."""
        node = self.get_object()
        token = node_token_rotate(node=node, user=request.user)
        return Response({"token": token, "agent_config_line": agent_config_line(token)})


class GpuViewSet(viewsets.ModelViewSet):
    """GPUs and MIG instances: readable by every role, writable by admins."""

    serializer_class = GpuSerializer
    permission_classes = [ReadAllWriteAdmin]
    queryset = Gpu.objects.select_related("node", "model", "mig_parent")

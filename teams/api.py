from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.response import Response

from teams.models import ApiToken, Membership, Project, Team
from teams.permissions import ReadAllWriteAdmin
from teams.roles import is_admin
from teams.serializers import (
    ApiTokenCreatedSerializer,
    ApiTokenSerializer,
    MembershipSerializer,
    ProjectSerializer,
    TeamSerializer,
)
from teams.services import team_delete


class TeamViewSet(viewsets.ModelViewSet):
    """Teams the caller may see (all for admin and finance; own teams otherwise). Admins write."""

    serializer_class = TeamSerializer
    permission_classes = [ReadAllWriteAdmin]
    lookup_field = "slug"

    def get_queryset(self):
        return Team.objects.visible_to(self.request.user)

    def perform_destroy(self, instance):
        team_delete(user=self.request.user, team=instance)  # its memberships go too, each audited


class LeadsWriteProjects(permissions.BasePermission):
    def has_permission(self, request, view):
        if not request.user.is_authenticated:
            return False
        return request.method in permissions.SAFE_METHODS or is_admin(request.user) or (
            Team.objects.led_by(request.user).exists()
        )

    def has_object_permission(self, request, view, obj):
        if request.method in permissions.SAFE_METHODS or is_admin(request.user):
            return True
        return Team.objects.led_by(request.user).filter(pk=obj.team_id).exists()


class ProjectViewSet(viewsets.ModelViewSet):
    """Projects of the teams the caller may see. Admins and the team's leads write."""

    serializer_class = ProjectSerializer
    permission_classes = [LeadsWriteProjects]

    def get_queryset(self):
        return Project.objects.visible_to(self.request.user).select_related("team")


class MembershipViewSet(viewsets.ReadOnlyModelViewSet):
    """Who holds which role in the teams the caller may see."""

    serializer_class = MembershipSerializer

    def get_queryset(self):
        return Membership.objects.visible_to(self.request.user).select_related("user", "team")


class ApiTokenViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet
):
    """The caller's own personal API tokens (admins see all). Create returns the token once;
    delete revokes it (the row stays, for the audit trail)."""

    serializer_class = ApiTokenSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema's generator: no user, the model is enough
            return ApiToken.objects.none()
        return ApiToken.objects.visible_to(self.request.user).select_related("user")

    @extend_schema(request=ApiTokenSerializer, responses={201: ApiTokenCreatedSerializer})
    def create(self, request, format=None):
        serializer = ApiTokenSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            token, raw = ApiToken.issue(
                user=request.user, name=serializer.validated_data["name"],
                expires_at=serializer.validated_data.get("expires_at"),
            )
        token.token = raw
        return Response(ApiTokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        instance.revoke()

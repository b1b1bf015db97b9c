from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from core.api import JsonText
from teams.models import ApiToken, Membership, Project, Team
from teams.roles import is_admin
from teams.selectors import project_name_taken


class TeamSerializer(JsonText, serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["id", "name", "slug", "cost_centre"]


class ProjectSerializer(JsonText, serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())

    class Meta:
        model = Project
        fields = ["id", "team", "name", "slug", "active"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None and request.user.is_authenticated and not is_admin(request.user):
            # A lead creates projects only in teams they lead; other slugs read as unknown.
            self.fields["team"].queryset = Team.objects.led_by(request.user)

    def validate(self, attrs):
        """A team's project names are unique whatever their case (the ``project_unique_name_per_team``
        constraint, an expression DRF does not turn into a validator): a 400 on ``name``, not a 500."""
        team = attrs.get("team", getattr(self.instance, "team", None))
        name = attrs.get("name", getattr(self.instance, "name", None))
        if team is not None and name is not None and project_name_taken(
                team, name, other_than=getattr(self.instance, "pk", None)):
            raise serializers.ValidationError({"name": [_("This team already has a project of this name.")]})
        return attrs


class MembershipSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", read_only=True)
    team = serializers.CharField(source="team.slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user", "team", "role"]


class ApiTokenSerializer(JsonText, serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "kind", "display_prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = ["kind", "display_prefix", "created_at", "last_used_at", "revoked_at"]

    def validate_expires_at(self, value):
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError(_("An expiry must be in the future."))
        return value


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text=_("The token itself. Shown once; only its hash is kept."))

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]

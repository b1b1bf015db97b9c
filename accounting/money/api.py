"""The money API (DESIGN.md §2, §5, §6): rate cards, energy tariffs, the charge policy, its audit trail
and quotas.

Who: admin and finance read and write prices and quotas; team leads read prices and the policy (their
costs are priced with them); engineers do not. Quotas are read like teams (admin and finance: all; leads
and engineers: their teams', another team's is a 404). The audit trail is admin's and finance's. Every
write is a service call (``accounting.money.services``): its ValidationError is a 400 naming the field
and the rule, its PermissionDenied a 403."""

from __future__ import annotations

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.response import Response
from rest_framework.views import APIView

from accounting.models import ChargePolicy, EnergyTariff, MoneyChange, RateCard
from accounting.money.serializers import (
    ChargePolicySerializer,
    EnergyTariffSerializer,
    MoneyChangeSerializer,
    QuotaSerializer,
    RateCardSerializer,
)
from accounting.money.services import (
    energy_tariff_delete,
    energy_tariff_save,
    policy_defaults,
    policy_update,
    quota_delete,
    quota_save,
    rate_card_delete,
    rate_card_save,
)
from accounting.quotas.selectors import quota_statuses, quotas_for
from core.api import ApiErrorSerializer
from teams.models import Membership
from teams.roles import TeamRole, sees_all_teams

WRITE_REFUSED = _("Only admin and finance change rate cards, energy tariffs, the charge policy and quotas.")
BAD_INPUT = OpenApiResponse(ApiErrorSerializer, description=_(
    "A field is missing or breaks a rule (overlapping validity, negative, end not after start, another currency "
    "than the configured one, unknown name); `detail` names the field and the rule."))
REFUSED = OpenApiResponse(ApiErrorSerializer, description=_(
    "Only admin and finance write; leads read prices and the policy, engineers do not."))
NOT_FOUND = OpenApiResponse(ApiErrorSerializer, description=_("No such row that the caller may see."))


def api_errors(exc: DjangoValidationError) -> dict | list:
    """A service's ValidationError in DRF's shape: ``{field: [message]}`` (non-field: ``non_field_errors``)."""
    if not hasattr(exc, "error_dict"):
        return {"non_field_errors": exc.messages}
    return {("non_field_errors" if field == NON_FIELD_ERRORS else field): messages
            for field, messages in exc.message_dict.items()}


class ServiceErrors:
    """Answer a service's Django ValidationError as a 400 in the project's error shape (DRF already answers
    Django's PermissionDenied with a 403)."""

    def handle_exception(self, exc):
        if isinstance(exc, DjangoValidationError):
            exc = serializers.ValidationError(api_errors(exc))
        return super().handle_exception(exc)


def leads_a_team(user) -> bool:
    return Membership.objects.filter(user=user, role=TeamRole.LEAD).exists()


class PricesReadByLeads(permissions.BasePermission):
    """Admin and finance read and write; team leads read; nobody else."""

    def has_permission(self, request, view):
        user = request.user
        if not user.is_authenticated:
            return False
        if sees_all_teams(user):
            return True
        if request.method in permissions.SAFE_METHODS:
            self.message = _("Prices and the charge policy are shown to admin, finance and team leads.")
            return leads_a_team(user)
        self.message = WRITE_REFUSED
        return False


class FinanceOnly(permissions.BasePermission):
    message = _("The record of money changes is shown to admin and finance.")

    def has_permission(self, request, view):
        return request.user.is_authenticated and sees_all_teams(request.user)


class ReadScopedWriteFinance(permissions.BasePermission):
    """Every signed-in role reads (the queryset scopes rows to their teams); admin and finance write."""

    message = WRITE_REFUSED

    def has_permission(self, request, view):
        if not request.user.is_authenticated:
            return False
        return request.method in permissions.SAFE_METHODS or sees_all_teams(request.user)


def write_schema(serializer):
    """The OpenAPI answers of a ServiceWrites viewset over ``serializer``."""
    return extend_schema_view(
        list=extend_schema(responses={200: serializer(many=True), 403: REFUSED}),
        retrieve=extend_schema(responses={200: serializer, 403: REFUSED, 404: NOT_FOUND}),
        create=extend_schema(responses={201: serializer, 400: BAD_INPUT, 403: REFUSED}),
        update=extend_schema(responses={200: serializer, 400: BAD_INPUT, 403: REFUSED, 404: NOT_FOUND}),
        partial_update=extend_schema(responses={200: serializer, 400: BAD_INPUT, 403: REFUSED, 404: NOT_FOUND}),
        destroy=extend_schema(responses={204: None, 403: REFUSED, 404: NOT_FOUND}),
    )


class ServiceWrites(ServiceErrors, viewsets.ModelViewSet):
    """A model viewset whose writes are service calls: ``save_service(user=…, **fields, <instance_argument>=…)``
    and ``delete_service(user=…, <instance_argument>=…)``. A PATCH keeps the fields it does not name."""

    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]
    writable: tuple[str, ...] = ()
    create_defaults: dict = {}
    instance_argument = ""

    def save_service(self, **values):
        raise NotImplementedError

    def delete_service(self, **values):
        raise NotImplementedError

    def answer(self, obj) -> dict:
        return self.get_serializer(obj).data

    @transaction.atomic  # the write and its answer: nothing saved when the answer fails
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        obj = self.save_service(user=request.user, **{**self.create_defaults, **serializer.validated_data})
        return Response(self.answer(obj), status=status.HTTP_201_CREATED)

    @transaction.atomic
    def update(self, request, *args, **kwargs):
        instance = self.get_object()
        serializer = self.get_serializer(instance, data=request.data, partial=kwargs.pop("partial", False))
        serializer.is_valid(raise_exception=True)
        values = {name: getattr(instance, name) for name in self.writable}
        if not serializer.partial:
            values.update(self.create_defaults)
        values.update(serializer.validated_data)
        obj = self.save_service(user=request.user, **values, **{self.instance_argument: instance})
        return Response(self.answer(obj))

    @transaction.atomic
    def destroy(self, request, *args, **kwargs):
        self.delete_service(user=request.user, **{self.instance_argument: self.get_object()})
        return Response(status=status.HTTP_204_NO_CONTENT)


@write_schema(RateCardSerializer)
class RateCardViewSet(ServiceWrites):
    """Rate cards: the price of a card-hour per GPU model over business days ``[valid_from, valid_until)``,
    in the configured currency; by model, then validity. Validity of one model never overlaps."""

    serializer_class = RateCardSerializer
    permission_classes = [PricesReadByLeads]
    queryset = RateCard.objects.select_related("gpu_model")
    writable = ("gpu_model", "valid_from", "valid_until", "price_per_card_hour", "currency")
    create_defaults = {"valid_until": None, "currency": None}
    instance_argument = "card"
    save_service = staticmethod(rate_card_save)
    delete_service = staticmethod(rate_card_delete)


@write_schema(EnergyTariffSerializer)
class EnergyTariffViewSet(ServiceWrites):
    """Energy tariffs: the price of a kWh over business days ``[valid_from, valid_until)`` (optional:
    without one, energy is not billed). Validity never overlaps."""

    serializer_class = EnergyTariffSerializer
    permission_classes = [PricesReadByLeads]
    queryset = EnergyTariff.objects.all()
    writable = ("valid_from", "valid_until", "price_per_kwh", "currency")
    create_defaults = {"valid_until": None, "currency": None}
    instance_argument = "tariff"
    save_service = staticmethod(energy_tariff_save)
    delete_service = staticmethod(energy_tariff_delete)


@write_schema(QuotaSerializer)
class QuotaViewSet(ServiceWrites):
    """Quotas of the teams the caller may see, each with where it stands today: used and remaining
    card-hours and the run-out forecast from the trailing 7-day burn. Admin and finance write."""

    serializer_class = QuotaSerializer
    permission_classes = [ReadScopedWriteFinance]
    writable = ("team", "gpu_model", "period_start", "expires", "card_hours")
    create_defaults = {"gpu_model": None}
    instance_argument = "quota"
    save_service = staticmethod(quota_save)
    delete_service = staticmethod(quota_delete)

    def get_queryset(self):
        return quotas_for(self.request.user).order_by("team__name", "period_start", "pk")

    def with_statuses(self, quotas) -> dict:
        statuses = quota_statuses(quotas=quotas)
        return {**self.get_serializer_context(), "statuses": {entry.quota.pk: entry for entry in statuses}}

    def answer(self, obj) -> dict:
        return QuotaSerializer(obj, context=self.with_statuses([obj])).data

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(QuotaSerializer(page, many=True, context=self.with_statuses(page)).data)

    def retrieve(self, request, *args, **kwargs):
        return Response(self.answer(self.get_object()))


@extend_schema_view(
    list=extend_schema(responses={200: MoneyChangeSerializer(many=True),
                                  403: OpenApiResponse(ApiErrorSerializer, description=FinanceOnly.message)}),
    retrieve=extend_schema(responses={200: MoneyChangeSerializer,
                                      403: OpenApiResponse(ApiErrorSerializer, description=FinanceOnly.message),
                                      404: NOT_FOUND}),
)
class MoneyChangeViewSet(viewsets.ReadOnlyModelViewSet):
    """Every change of a rate card, tariff, the charge policy or a quota: who, when, what, before and
    after. Newest first; never edited."""

    serializer_class = MoneyChangeSerializer
    permission_classes = [FinanceOnly]
    queryset = MoneyChange.objects.select_related("changed_by")


class ChargePolicyView(ServiceErrors, APIView):
    """The charge policy: idle charge factor, overflow multiplier and what happens to unallocated capacity.
    Until admin or finance first change it, the settings' defaults apply (``updated_at`` null)."""

    permission_classes = [PricesReadByLeads]
    serializer_class = ChargePolicySerializer

    @extend_schema(responses={200: ChargePolicySerializer, 403: REFUSED})
    def get(self, request):
        policy = ChargePolicy.objects.filter(id=1).first() or ChargePolicy(**policy_defaults())
        return Response(ChargePolicySerializer(policy).data)

    @extend_schema(request=ChargePolicySerializer, responses={200: ChargePolicySerializer, 400: BAD_INPUT,
                                                              403: REFUSED},
                   description=_("Set all three values; every change is recorded (see /money-changes/)."))
    def put(self, request):
        return self._write(request, partial=False)

    @extend_schema(request=ChargePolicySerializer, responses={200: ChargePolicySerializer, 400: BAD_INPUT,
                                                              403: REFUSED},
                   description=_("Set some of the values; every change is recorded (see /money-changes/)."))
    def patch(self, request):
        return self._write(request, partial=True)

    def _write(self, request, *, partial: bool):
        serializer = ChargePolicySerializer(data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        policy = policy_update(user=request.user, **serializer.validated_data)
        return Response(ChargePolicySerializer(policy).data)

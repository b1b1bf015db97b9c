"""The bookings API (DESIGN.md §6): role-scoped reads; book, extend or shorten, cancel or end early; and
the earliest free slot for a request. Every rule is the services' (``cluster.bookings.services``); a refusal
comes back as its HTTP status with the project's error shape."""

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, mixins, permissions, status, viewsets
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import APIView

from cluster.bookings.selectors import availability, bookings_for_list
from cluster.bookings.serializers import (
    AvailabilityQuerySerializer,
    AvailabilitySerializer,
    BookingCreateSerializer,
    BookingEndSerializer,
    BookingFilterSerializer,
    BookingSerializer,
    GuaranteeSerializer,
    with_holds,
)
from cluster.bookings.services import BookingRefused, booking_cancel, booking_create, booking_set_end
from cluster.jobs.selectors import is_service_token
from cluster.models import Booking, TeamGuarantee
from core.api import ApiErrorSerializer, StrictJSONParser

ERRORS = {
    400: OpenApiResponse(ApiErrorSerializer, description=_("A field breaks a rule (grid, length, horizon, limits, "
                                                           "unknown name); `detail` names it.")),
    403: OpenApiResponse(ApiErrorSerializer, description=_("Engineers book for themselves, leads for their team; "
                                                           "service tokens never book.")),
    409: OpenApiResponse(ApiErrorSerializer, description=_("The GPUs are held then: the answer names the conflicting "
                                                           "slot's time and team, nothing else.")),
}
NOT_FOUND = {404: OpenApiResponse(ApiErrorSerializer, description=_("No booking of a team you belong to has this id."))}


class BookingRefusal(APIException):
    """A ``BookingRefused`` as an API error: its status, and ``{field: [message]}`` (the handler adds ``detail``)."""

    def __init__(self, refused: BookingRefused):
        self.status_code = refused.status
        super().__init__({refused.field: [refused.message]})


class BookingRefusalsAsErrors:
    """Answer a service's ``BookingRefused`` with its status and the project's error shape."""

    def handle_exception(self, exc):
        if isinstance(exc, BookingRefused):
            exc = BookingRefusal(exc)
        return super().handle_exception(exc)


class BookingWriters(permissions.BasePermission):
    """Every signed-in person reads (scoped by the queryset) and may ask to book; the services decide
    for whom. Service tokens (scheduler hooks) record jobs and never book."""

    message = _("Service tokens record jobs; they cannot book GPUs.")

    def has_permission(self, request, view):
        if not request.user.is_authenticated:
            return False
        return request.method in permissions.SAFE_METHODS or not is_service_token(request)


class BookingViewSet(BookingRefusalsAsErrors, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                     viewsets.GenericViewSet):
    """Bookings of the caller's teams (admin and finance: every team's), newest start first. Filters:
    ``team``, ``status``, ``mine``, ``start_after``, ``start_before``."""

    serializer_class = BookingSerializer
    permission_classes = [BookingWriters]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    parser_classes = [StrictJSONParser]

    def get_queryset(self):
        bookings = with_holds(bookings_for_list(self.request.user))
        if self.action == "list":
            filters = BookingFilterSerializer(data=self.request.query_params, context=self.get_serializer_context())
            filters.is_valid(raise_exception=True)
            bookings = filters.filter(bookings)
        return bookings

    @extend_schema(parameters=[BookingFilterSerializer])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(responses={200: BookingSerializer, **NOT_FOUND})
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(
        request=BookingCreateSerializer,
        responses={201: OpenApiResponse(BookingSerializer, description=_("Booked.")), **ERRORS},
        description=_(
            "Book a team's GPUs over [start, end) on the 30-minute grid: `count` GPUs of `gpu_model` (the system "
            "picks them, packing one node first), named `gpus`, or a whole `node`; exactly one of the three. "
            "A start inside the current grid step begins now. An engineer books for themself, a lead for anyone "
            "in the team (`booker`)."
        ),
    )
    def create(self, request, format=None):
        serializer = BookingCreateSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        booking = booking_create(user=request.user, **serializer.validated_data)
        return Response(self._row(booking), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=BookingEndSerializer,
        responses={200: BookingSerializer, **ERRORS, **NOT_FOUND},
        description=_("Move the end of a booking that has not ended: later when its GPUs are free (else 409), or "
                      "earlier. Nothing else changes; the booker or a team lead may do it."),
    )
    def partial_update(self, request, pk=None, format=None):
        booking = self.get_object()
        serializer = BookingEndSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        booking = booking_set_end(user=request.user, booking=booking, end=serializer.validated_data["end"])
        return Response(self._row(booking))

    @extend_schema(
        request=None,
        responses={
            200: OpenApiResponse(BookingSerializer, description=_(
                "The booking's new state: `cancelled` when it had not started (its GPUs are free again), "
                "`ended` with `end` = now when it was running.")),
            **{code: ERRORS[code] for code in (400, 403)}, **NOT_FOUND,
        },
        description=_("Cancel a booking that has not started, or end a running one now. The booker or a team "
                      "lead may do it."),
    )
    def destroy(self, request, pk=None, format=None):
        booking = booking_cancel(user=request.user, booking=self.get_object())
        return Response(self._row(booking))

    def _row(self, booking: Booking) -> dict:
        return BookingSerializer(with_holds(Booking.objects.filter(pk=booking.pk)).get()).data


class AvailabilityView(BookingRefusalsAsErrors, APIView):
    """The earliest slot in which ``count`` GPUs of ``model`` are free for the length of ``[start, end)``,
    from ``start`` on. Occupancy is public within the cluster: any signed-in role may ask."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        parameters=[AvailabilityQuerySerializer],
        responses={
            200: AvailabilitySerializer,
            400: OpenApiResponse(ApiErrorSerializer, description=_("A parameter is missing or breaks a rule; "
                                                                   "`detail` names it.")),
        },
    )
    def get(self, request):
        query = AvailabilityQuerySerializer(data=request.query_params, context={"request": request})
        query.is_valid(raise_exception=True)
        asked = query.validated_data
        found = availability(
            gpu_model=asked["model"], count=asked["count"], start=asked["start"], end=asked["end"], team=asked["team"],
        )
        body = {
            "requested": {"start": asked["start"], "end": asked["end"], "count": asked["count"],
                          "model": asked["model"].short_name},
            "slot": {"start": found.slot.start, "end": found.slot.end} if found.slot else None,
            "gpus": [_candidate(c) for c in found.picked],
            "free_gpus": [_candidate(c) for c in found.slot.free] if found.slot else [],
            "total": found.total,
        }
        return Response(AvailabilitySerializer(body).data)


def _candidate(candidate) -> dict:
    return {"id": candidate.gpu_id, "name": f"{candidate.node_name}/{candidate.index}", "node": candidate.node_name}


class GuaranteeListView(generics.ListAPIView):
    """Every team's guaranteed shares (issue 19), as the booking calendar shows them to anyone signed in:
    reserved capacity is part of the public occupancy. Managed in the admin site, each change audited."""

    permission_classes = [permissions.IsAuthenticated]
    serializer_class = GuaranteeSerializer
    queryset = TeamGuarantee.objects.select_related("team", "gpu_model").order_by("team__slug", "gpu_model__short_name")

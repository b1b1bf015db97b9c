"""The booking pages (DESIGN.md §6): the week calendar, the booking form (with the earliest free slot and
the GPU memory estimator), and a person's bookings with cancel, end-now and extend. The rules are the
services' (``cluster.bookings.services``); these views turn their refusals into form errors and messages."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from cluster.bookings.calendar import GROUP_BY_MODEL, calendar_for_week, legend, week_bounds
from cluster.bookings.forms import LOCAL_MINUTE, BookingEndForm, BookingForm, WeekForm, initial_from_query
from cluster.bookings.guarantees import guarantees_now
from cluster.bookings.holds import local_span
from cluster.bookings.selectors import availability, bookings_for_list
from cluster.bookings.services import (
    BookingRefused,
    booking_cancel,
    booking_create,
    booking_limits,
    booking_set_end,
    bookings_writable_by,
)
from cluster.bookings.slots import ceil_to_grid, floor_to_grid
from cluster.models import Booking, BookingMode, BookingStatus, GpuHold, GpuModel
from core.timeutils import epoch_ms
from core.timewindow import in_window
from teams.models import Team

BOOKINGS_PER_PAGE = 50
SERVICE_FIELDS = {"end": "hours", "id": None}  # a refusal's field → the form field it is shown on


def calendar_url(*, day=None, group: str = "") -> str:
    query = [f"week={day.isoformat()}"] if day else []
    if group == GROUP_BY_MODEL:
        query.append(f"group={group}")
    return reverse("cluster:booking-calendar") + (f"?{'&'.join(query)}" if query else "")


@login_required
def booking_calendar(request):
    """One week of every bookable GPU: free, mine, my team's, other teams' (by team name), maintenance, down;
    and the guaranteed shares with what each reserves now (issue 19)."""
    zone = timezone.get_current_timezone()
    now = timezone.now()
    today = timezone.localdate(now, zone)
    day, group = WeekForm(request.GET or None).chosen(today=today)
    week_start, week_end = week_bounds(day, zone)
    week = calendar_for_week(request.user, week_start=week_start, week_end=week_end, group=group, now=now, zone=zone)
    monday = timezone.localdate(week_start, zone)
    return render(request, "cluster/booking_calendar.html", {
        "week": week,
        "by_model": group == GROUP_BY_MODEL,
        "legend": legend(),
        "week_last_day": monday + timedelta(days=6),
        "previous_url": calendar_url(day=monday - timedelta(days=7), group=group),
        "next_url": calendar_url(day=monday + timedelta(days=7), group=group),
        "this_week_url": calendar_url(group=group),
        "is_this_week": week_start <= now < week_end,
        "other_group_url": calendar_url(day=monday, group="" if group == GROUP_BY_MODEL else GROUP_BY_MODEL),
        "week_start_ms": epoch_ms(week_start),
        "week_end_ms": epoch_ms(week_end),
        "grid_ms": booking_limits(None).grid_minutes * 60_000,
        "guarantees": guarantees_now(now=now),
    })


def _initial_start(raw: str | None, *, now: datetime, grid_minutes: int) -> datetime:
    """A start asked for by the calendar (ISO), on the grid and not in the past; else the next grid step."""
    try:
        asked = parse_datetime(raw) if raw else None
    except ValueError:  # well formed but not a date, such as month 13
        asked = None
    if asked is not None and timezone.is_aware(asked) and in_window(asked):
        asked = floor_to_grid(asked, grid_minutes)
        if asked >= floor_to_grid(now, grid_minutes):
            return asked
    return ceil_to_grid(now, grid_minutes)


def _estimator(request) -> dict:
    from cluster.bookings.estimator_forms import estimator_context

    return estimator_context(request.GET, gpu_models=GpuModel.objects.all())


def _form_page(request, form, *, status: int = 200, proposal: str = ""):
    return render(request, "cluster/booking_form.html", {
        "form": form, "proposal": proposal, "mode_fields": _mode_fields(form), **_estimator(request),
        "who_fields": [form[name] for name in ("team", "booker", "project") if name in form.fields],
        "when_fields": [form["start"], form["hours"], form["note"]],
    }, status=status)


def _mode_fields(form) -> list[tuple[str, str, list]]:
    """(mode, label, bound fields) for the fieldset of each way of choosing GPUs."""
    fields = {BookingMode.MODEL: ["gpu_model", "count"], BookingMode.GPUS: ["gpus"], BookingMode.NODE: ["node"]}
    return [(mode, BookingMode(mode).label, [form[name] for name in fields[mode]]) for mode in BookingMode.values]


def _show_refusal(form, refused: BookingRefused) -> None:
    field = SERVICE_FIELDS.get(refused.field, refused.field)
    if field in form.fields:
        form.add_error(field, refused.message)
    else:
        form.add_error(None, f"{refused.field}: {refused.message}" if field else refused.message)


def _propose(request, form):
    """Re-render the form with its start moved to the earliest slot for its request, and say where."""
    wanted = form.search_request()
    if wanted is None:
        form.add_error("gpu_model", gettext("Choose a GPU model and a count to search for a free slot."))
        return _form_page(request, form, status=400)
    gpu_model, count = wanted
    start, end = form.cleaned_data["start"], form.end()
    found = availability(gpu_model=gpu_model, count=count, start=start, end=end, team=form.cleaned_data["team"])
    if found.total < count:
        return _form_page(request, form, proposal=gettext(
            "The cluster has %(total)d %(model)s GPUs that can be booked now."
        ) % {"total": found.total, "model": gpu_model})
    if found.slot is None:
        return _form_page(request, form, proposal=gettext("No slot within the booking horizon."))
    slot_start = floor_to_grid(found.slot.start, booking_limits(form.cleaned_data["team"]).grid_minutes)
    data = request.POST.copy()
    data.update({
        "start": timezone.localtime(slot_start).strftime(LOCAL_MINUTE), "mode": BookingMode.MODEL,
        "gpu_model": str(gpu_model.pk), "count": str(count),
    })
    moved = BookingForm(data, user=request.user)
    moved.is_valid()
    gpus = ", ".join(f"{gpu.node_name}/{gpu.index}" for gpu in found.picked)
    line = gettext("Earliest free: %(span)s on %(gpus)s.") % {
        "span": local_span(slot_start, slot_start + (end - start)), "gpus": gpus,
    }
    return _form_page(request, moved, proposal=line)


@login_required
def booking_new(request):
    """Ask for GPUs; "Find the earliest slot" proposes a start instead of booking."""
    if request.method != "POST":
        start = _initial_start(request.GET.get("start"), now=timezone.now(),
                               grid_minutes=booking_limits(None).grid_minutes)
        return _form_page(request, BookingForm(user=request.user, initial=initial_from_query(request.GET, start=start)))
    form = BookingForm(request.POST, user=request.user)
    if not form.is_valid():
        return _form_page(request, form, status=400)
    if "propose" in request.POST:
        return _propose(request, form)
    data = form.cleaned_data
    try:
        booking = booking_create(
            user=request.user, team=data["team"], start=data["start"], end=form.end(), project=data["project"],
            booker=data.get("booker") or request.user, note=data["note"], **form.what(),
        )
    except BookingRefused as refused:
        _show_refusal(form, refused)
        return _form_page(request, form, status=refused.status)
    names = ", ".join(str(hold.gpu) for hold in booking.holds.select_related("gpu__node").order_by("gpu__node__hostname",
                                                                                                     "gpu__index"))
    messages.success(request, gettext("Booked %(gpus)s for %(span)s.") % {
        "gpus": names, "span": local_span(booking.start, booking.end),
    })
    return redirect(calendar_url(day=timezone.localdate(booking.start)))


def _with_gpus(bookings):
    holds = GpuHold.objects.select_related("gpu__node").order_by("gpu__node__hostname", "gpu__index")
    return bookings.prefetch_related(Prefetch("holds", queryset=holds))


def _annotate(rows: list[Booking], *, writable: set[int], now: datetime) -> None:
    for booking in rows:
        booking.gpu_names = ", ".join(str(hold.gpu) for hold in booking.holds.all())
        live = booking.pk in writable and booking.status == BookingStatus.BOOKED and booking.end > now
        booking.can_cancel = live and booking.start > now
        booking.can_end = live and booking.start <= now
        booking.can_extend = live


def _page_url(request, param: str, number: int) -> str:
    query = request.GET.copy()
    query[param] = str(number)
    return f"?{query.urlencode()}"


def _table(request, *, key: str, title: str, bookings, param: str, show_booker: bool = False) -> dict:
    """One paginated table of bookings, its rows annotated with what the viewer may do."""
    page = Paginator(_with_gpus(bookings), BOOKINGS_PER_PAGE).get_page(request.GET.get(param))
    return {
        "key": key, "title": title, "show_booker": show_booker, "page": page, "rows": list(page.object_list),
        "previous_url": _page_url(request, param, page.previous_page_number()) if page.has_previous() else "",
        "next_url": _page_url(request, param, page.next_page_number()) if page.has_next() else "",
    }


@login_required
def booking_mine(request):
    """The viewer's bookings, and for a lead the bookings of others in the teams they lead."""
    now = timezone.now()
    user = request.user
    tables = [_table(request, key="mine", title=gettext("Booked for me"), param="page",
                     bookings=bookings_for_list(user, mine_only=True))]
    led = Team.objects.led_by(user)
    if led.exists():
        tables.append(_table(
            request, key="team", title=gettext("Booked for others in teams I lead"), param="team_page", show_booker=True,
            bookings=bookings_for_list(user).filter(team__in=led).exclude(booker=user),
        ))
    shown = [booking.pk for table in tables for booking in table["rows"]]
    writable = set(bookings_writable_by(user).filter(pk__in=shown).values_list("pk", flat=True))
    for table in tables:
        _annotate(table["rows"], writable=writable, now=now)
    return render(request, "cluster/booking_mine.html", {"tables": tables, "back": request.get_full_path()})


def _visible_booking(request, pk: int) -> Booking:
    """Another team's booking is a 404: whether it exists is private."""
    return get_object_or_404(Booking.objects.visible_to(request.user), pk=pk)


def _back(request) -> HttpResponseRedirect:
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        target = reverse("cluster:booking-mine")
    return HttpResponseRedirect(target)


def _refused(request, refused: BookingRefused) -> HttpResponseRedirect:
    if refused.status == 404:
        raise Http404(refused.message)
    messages.error(request, refused.message)
    return _back(request)


@require_POST
@login_required
def booking_cancel_view(request, pk: int):
    """Cancel before the start, or end now while running."""
    booking = _visible_booking(request, pk)
    try:
        booking = booking_cancel(user=request.user, booking=booking)
    except BookingRefused as refused:
        return _refused(request, refused)
    if booking.status == BookingStatus.CANCELLED:
        messages.success(request, gettext("Booking #%(id)d cancelled.") % {"id": booking.pk})
    else:
        messages.success(request, gettext("Booking #%(id)d ended; its GPUs are free.") % {"id": booking.pk})
    return _back(request)


@require_POST
@login_required
def booking_extend_view(request, pk: int):
    """Move a booking's end (later when the GPUs are free, or earlier)."""
    booking = _visible_booking(request, pk)
    form = BookingEndForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(form.errors["end"]))
        return _back(request)
    try:
        booking = booking_set_end(user=request.user, booking=booking, end=form.cleaned_data["end"])
    except BookingRefused as refused:
        return _refused(request, refused)
    messages.success(request, gettext("Booking #%(id)d now runs %(span)s.") % {
        "id": booking.pk, "span": local_span(booking.start, booking.end),
    })
    return _back(request)

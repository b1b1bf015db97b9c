"""The finance page (issue 8, DESIGN.md §5): a month's statements per team, closing and reopening it,
rate cards and the charge policy, the audit trail of money changes, and downloads of the statement and
of the usage report. Admin and finance only: everyone else gets 403.

For a month with a closed statement the page shows that statement's rows (accounting.money.statements
.statement_rows); for an open month, what closing would book now ("month to date",
accounting.money.statements.priced_usage). The statement download holds exactly the rows the page shows, so
its totals rows are the page's team totals. Both downloads end with a grand-total row ("Total"); their XLSX
files have human headers and number formats (accounting.money.exports).

A month is closed only once it has ended: until then the page offers no Close button but says from which
day it can be closed, and a POST to close it is refused with 400. Who closed a statement is its user, or
"system" when the scheduled task or the command line closed it (no user)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from accounting.models import ChargePolicy, LedgerKind, MoneyChange, RateCard, Statement, StatementStatus
from accounting.money.close import CloseRefused, close_period, reopen_period
from accounting.money.exports import (
    CARD_HOURS_FORMAT,
    COLUMN_HEADERS,
    INTEGER_FORMAT,
    amount_format,
    download_response,
    total_row,
)
from accounting.money.forms import (
    CloseForm,
    PeriodForm,
    PolicyForm,
    RateCardForm,
    ReopenForm,
    add_service_errors,
)
from accounting.money.services import policy_defaults, policy_update, rate_card_save
from accounting.money.statements import (
    COLUMNS,
    TOTAL_KIND,
    grand_total_row,
    period_label,
    priced_usage,
    statement_rows,
    statement_totals,
    total_of,
)
from accounting.usage.report import usage_report
from core.timeutils import business_day_bounds, business_today, month_days, previous_month
from teams.roles import sees_all_teams

AUDIT_ROWS = 10
FILE_FORMATS = ("csv", "xlsx")


def _now() -> datetime:
    """The page's clock (tests replace it to close a month that has not ended by the real clock)."""
    return timezone.now()


def finance_only(view):
    """Signed in, and admin or finance: everyone else 403 (statements of every team are costs)."""

    @login_required
    @wraps(view)
    def guarded(request, *args, **kwargs):
        if not sees_all_teams(request.user):
            raise PermissionDenied(_("The finance page is for finance and admins."))
        return view(request, *args, **kwargs)

    return guarded


# ---- what the page shows -------------------------------------------------------------------------------------

def default_period(now: datetime) -> date:
    """Last month, by the business calendar."""
    return previous_month(business_today(now=now))


@dataclass
class TeamStatement:
    """One team's rows of a statement (or of the month to date) and its totals row."""

    team: str
    cost_centre: str
    card_hours: Decimal
    amount: Decimal
    lines: list[dict] = field(default_factory=list)


def team_statements(rows: list[dict]) -> list[TeamStatement]:
    """The rows grouped per team: each team's lines end with its totals row (accounting.money.statements)."""
    teams, lines = [], []
    for row in rows:
        if row["kind"] != TOTAL_KIND:
            lines.append({**row, "kind_label": LedgerKind(row["kind"]).label})  # the page's words for the kind
            continue
        teams.append(TeamStatement(row["team"], row["cost_centre"], row["card_hours"], row["amount"], lines))
        lines = []
    return teams


def closed_by_label(statement: Statement) -> str:
    """Who closed ``statement``: the person, or the system when no one did (the scheduled close task and
    ``manage.py close_period`` without ``--user`` close with no user; the statement does not say which)."""
    if statement.closed_by is None:
        return _("system (scheduled close or command line)")
    return str(statement.closed_by)


def month_ended(period: date, *, now: datetime) -> bool:
    """Whether the month of ``period`` is over at ``now`` (by the business calendar): only then can it close."""
    return now >= business_day_bounds(month_days(period)[1])[0]


def close_later_message(period: date) -> str:
    """Why a month that has not ended cannot be closed yet, naming the day it can."""
    first, following = month_days(period)
    return _("%(period)s can be closed from %(day)s, once the month has ended.") % {
        "period": period_label(first), "day": following.isoformat()}


@dataclass
class PeriodStatement:
    """The month as the page shows it: its statements (revisions), the closed one if any, and the rows."""

    period: date
    revisions: list[Statement]
    closed: Statement | None
    rows: list[dict]
    total: Decimal
    currency: str
    unpriced: list[str]
    ended: bool

    @property
    def label(self) -> str:
        return period_label(self.period)

    @property
    def teams(self) -> list[TeamStatement]:
        return team_statements(self.rows)

    @property
    def closed_by(self) -> str:
        return closed_by_label(self.closed) if self.closed is not None else ""

    @property
    def revision_rows(self) -> list[tuple[Statement, str]]:
        """Each revision with who closed it."""
        return [(revision, closed_by_label(revision)) for revision in self.revisions]

    @property
    def close_later(self) -> str:
        """Why the Close button is not offered (the month has not ended), else empty."""
        return "" if self.ended else close_later_message(self.period)

    @property
    def download_name(self) -> str:
        if self.closed is not None:
            return f"statement-{self.label}-r{self.closed.revision}"
        return f"priced-usage-{self.label}"


def period_statement(period: date, *, user, now: datetime) -> PeriodStatement:
    first = month_days(period)[0]
    revisions = list(Statement.objects.filter(period=first).select_related("closed_by", "reopened_by")
                     .order_by("revision"))
    closed = next((s for s in revisions if s.status == StatementStatus.CLOSED), None)
    ended = month_ended(first, now=now)
    if closed is not None:
        rows = statement_rows(closed, user=user)
        total = statement_totals([closed], user=user)[closed.pk]
        return PeriodStatement(first, revisions, closed, rows, total, closed.currency, [], ended)
    report = priced_usage(period=first, user=user, now=now)
    currency = settings.CARDHOUR_CURRENCY
    return PeriodStatement(first, revisions, None, report.rows, total_of(report.rows, currency=currency), currency,
                           report.unpriced, ended)


def period_usage_report(period: date, *, user, now: datetime):
    """The usage report by team over the month's business days."""
    first, following = month_days(period)
    return usage_report(start=business_day_bounds(first)[0], end=business_day_bounds(following)[0], by="team",
                        user=user, now=now)


def audit_trail() -> list[dict]:
    """The last money changes, each with the fields it changed as (field, before, after)."""
    trail = []
    for change in MoneyChange.objects.select_related("changed_by")[:AUDIT_ROWS]:
        before, after = change.before or {}, change.after or {}
        changed = [(name, before.get(name), after.get(name)) for name in sorted(before.keys() | after.keys())
                   if before.get(name) != after.get(name)]
        trail.append({"change": change, "changed": changed})
    return trail


def _policy_initial() -> dict:
    policy = ChargePolicy.objects.filter(id=1).values("idle_charge_factor", "overflow_multiplier", "unallocated").first()
    return policy or policy_defaults()


def _finance_url(period: date) -> str:
    return f"{reverse('accounting:finance')}?period={period_label(period)}"


def _render(request, period: date, *, now: datetime, status: int = 200, **forms):
    first, following = month_days(period)
    statement = period_statement(first, user=request.user, now=now)
    context = {
        "statement": statement,
        "usage": period_usage_report(first, user=request.user, now=now),
        "period_form": PeriodForm(initial={"period": statement.label}),
        "previous_period": period_label(previous_month(first)),
        "next_period": period_label(following),
        "close_form": CloseForm(initial={"period": statement.label}),
        "reopen_form": forms.get("reopen_form") or ReopenForm(initial={"period": statement.label}),
        "rate_card_form": forms.get("rate_card_form") or RateCardForm(),
        "policy_form": forms.get("policy_form") or PolicyForm(initial=_policy_initial()),
        "rate_cards": RateCard.objects.select_related("gpu_model").order_by("gpu_model__short_name", "valid_from"),
        "audit": audit_trail(),
        "file_formats": FILE_FORMATS,
    }
    return render(request, "accounting/finance.html", context, status=status)


def _requested_period(data, now: datetime) -> date:
    form = PeriodForm(data)
    if data.get("period") and form.is_valid():
        return form.cleaned_data["period"]
    return default_period(now)


# ---- views ---------------------------------------------------------------------------------------------------

@finance_only
def finance(request):
    """The page; POST ``action=rate_card`` adds a rate card, ``action=policy`` changes the charge policy."""
    now = _now()
    period = _requested_period(request.GET, now)
    if request.method != "POST":
        return _render(request, period, now=now)
    action = request.POST.get("action")
    if action == "rate_card":
        form = RateCardForm(request.POST)
        if form.is_valid():
            try:
                card = rate_card_save(user=request.user, **form.cleaned_data)
            except ValidationError as error:
                add_service_errors(form, error)
            else:
                messages.success(request, _("Rate card for %(model)s from %(start)s saved.") % {
                    "model": card.gpu_model.short_name, "start": card.valid_from.isoformat()})
                return redirect(_finance_url(period))
        return _render(request, period, now=now, status=400, rate_card_form=form)
    if action == "policy":
        form = PolicyForm(request.POST)
        if form.is_valid():
            try:
                policy_update(user=request.user, **form.cleaned_data)
            except ValidationError as error:
                add_service_errors(form, error)
            else:
                messages.success(request, _("Charge policy saved."))
                return redirect(_finance_url(period))
        return _render(request, period, now=now, status=400, policy_form=form)
    return _render(request, period, now=now, status=400)


@finance_only
@require_POST
def finance_close(request):
    """Close the month; a refusal lists every problem as a message on the page it redirects to."""
    now = _now()
    form = CloseForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Choose a month to close."))
        return redirect("accounting:finance")
    period = form.cleaned_data["period"]
    if not month_ended(period, now=now):
        messages.error(request, close_later_message(period))
        return _render(request, period, now=now, status=400)
    already = Statement.objects.filter(period=period, status=StatementStatus.CLOSED).exists()
    try:
        statement = close_period(period=period, user=request.user, now=now)
    except CloseRefused as refused:
        messages.error(request, _("%(period)s was not closed:") % {"period": period_label(period)})
        for problem in refused.problems:
            messages.error(request, problem)
    else:
        if already:
            messages.info(request, _("%(period)s was already closed.") % {"period": period_label(period)})
        else:
            messages.success(request, _("%(period)s closed: statement revision %(revision)d.") % {
                "period": period_label(period), "revision": statement.revision})
    return redirect(_finance_url(period))


@finance_only
@require_POST
def finance_reopen(request):
    """Reopen the month with a reason; without one the page comes back with the error on the form."""
    now = _now()
    form = ReopenForm(request.POST)
    if not form.is_valid():
        period = form.cleaned_data.get("period") or _requested_period(request.POST, now)
        return _render(request, period, now=now, status=400, reopen_form=form)
    period = form.cleaned_data["period"]
    try:
        reopen_period(period=period, user=request.user, reason=form.cleaned_data["reason"], now=now)
    except CloseRefused as refused:
        for problem in refused.problems:
            messages.error(request, problem)
    else:
        messages.success(request, _("%(period)s reopened.") % {"period": period_label(period)})
    return redirect(_finance_url(period))


def _file_format(request) -> str:
    file_format = request.GET.get("format", "csv")
    if file_format not in FILE_FORMATS:
        raise Http404(_("Downloads are CSV or XLSX."))
    return file_format


def _download(columns, rows, *, file_format: str, name: str, total: dict | None,
              number_formats: dict[str, str]) -> HttpResponse:
    """A download with the grand-total row ``total`` (none when there are no rows) and, in XLSX, human headers."""
    return download_response(columns, rows, file_format=file_format, filename=f"{name}.{file_format}",
                             sheet_title=name, headers=COLUMN_HEADERS, number_formats=number_formats,
                             total=total if rows else None)


def usage_total_row(report) -> dict:
    """The usage report's grand total: "Total" in ``team``, each card-hour column the sum of the rows'
    (as shown), the window and its data_complete_to kept."""
    return total_row(report.columns, report.rows, label_column="team", label=_("Total"),
                     summed=[c for c in report.columns if "card_hours" in c], kept=("start", "end", "data_complete_to"))


@finance_only
@require_GET
def finance_statement_download(request):
    """The rows the page shows for the month (its closed statement, or the month to date) as CSV or XLSX."""
    now = _now()
    file_format = _file_format(request)
    statement = period_statement(_requested_period(request.GET, now), user=request.user, now=now)
    formats = {"card_hours": CARD_HOURS_FORMAT, "ticks": INTEGER_FORMAT, "amount": amount_format(statement.currency)}
    return _download(COLUMNS, statement.rows, file_format=file_format, name=statement.download_name,
                     total=grand_total_row(statement.rows, label=_("Total")), number_formats=formats)


@finance_only
@require_GET
def finance_usage_download(request):
    """The usage report by team over the month, as CSV or XLSX."""
    now = _now()
    file_format = _file_format(request)
    period = _requested_period(request.GET, now)
    report = period_usage_report(period, user=request.user, now=now)
    formats = {column: CARD_HOURS_FORMAT for column in report.columns if "card_hours" in column}
    return _download(report.columns, report.rows, file_format=file_format, name=f"usage-{period_label(period)}",
                     total=usage_total_row(report), number_formats=formats)

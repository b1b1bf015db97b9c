"""The threshold backtest's parameters (issue 19), shared by the page, its CSV and the command: the scope (a pool
or a team), the GPU model, the period (business days, both included) and one to four rule sets (fields
``r1-up`` … ``r4-headroom``; a rule set left empty is not replayed). Every refusal names the parameter and its
rule. Who may backtest what is decided here too:

- admins and finance: any pool or team (they see every team's usage and costs already);
- a team's lead: that team only, never a pool (a pool's history is every team's); a pool or another team's slug
  is refused exactly as an unknown one is (the page answers 404 for both);
- anyone else (an engineer): no backtest at all (403).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django import forms
from django.conf import settings
from django.db.models import Sum
from django.utils.translation import gettext_lazy as _

from accounting.models import DailyUsage
from accounting.usage.states import ALLOCATED_STATES
from boards.backtest.inputs import Scope
from boards.backtest.selectors import backtest_teams, sees_every_scope
from boards.backtest.simulate import FULL_PCT, MEMORY, UTILIZATION, RuleSet
from cluster.models import GpuModel, Node
from core.timeutils import business_day_bounds, business_today, month_days, previous_month
from core.timewindow import WINDOW_START
from core.widgets import QuickSelect
from teams.models import Team

MAX_DAYS = 62
MAX_RULES = 4
MAX_GPUS = 100_000
MAX_MINUTES = 7 * 24 * 60
RULE_KEYS = ("name", "metric", "up", "down", "group", "min", "max", "cooldown", "buffer", "headroom")

SCOPE_RULE = _("Choose one scope: a pool or a team, not both.")
POOL_RULE = _("The “pool” parameter must name a node pool you may backtest.")
TEAM_RULE = _("The “team” parameter must be the slug of a team you may backtest.")
MODEL_RULE = _("The “gpu_model” parameter must be a GPU model's short name, such as H200.")
DATE_RULE = _("Dates are business days written YYYY-MM-DD.")
ORDER_RULE = _("The period's first day must not be after its last.")
LENGTH_RULE = _("A backtest replays at most %(days)s days.")
WINDOW_RULE = _("The period must lie between 2000-01-01 and today.")
RETENTION_RULE = _("Minute history is kept %(days)s days: the period must begin on %(first)s or later.")
COUNT_RULE = _("Give one to four rule sets.")
THRESHOLD_RULE = _("The scale-down threshold must be below the scale-up threshold.")
BOUNDS_RULE = _("The minimum GPUs must not exceed the maximum.")


class RuleForm(forms.Form):
    """One rule set: thresholds in percent, sizes in GPUs, times in minutes."""

    name = forms.CharField(label=_("Name"), required=False, max_length=40)
    metric = forms.ChoiceField(label=_("Metric"), required=False,
                               choices=[(MEMORY, _("Memory used %")), (UTILIZATION, _("Utilization %"))])
    up = forms.FloatField(label=_("Scale up at or above (%)"), min_value=0, max_value=FULL_PCT)
    down = forms.FloatField(label=_("Scale down below (%)"), min_value=0, max_value=FULL_PCT)
    group = forms.IntegerField(label=_("Group size (GPUs)"), min_value=1, max_value=MAX_GPUS)
    min = forms.IntegerField(label=_("Minimum GPUs"), min_value=0, max_value=MAX_GPUS)
    max = forms.IntegerField(label=_("Maximum GPUs"), min_value=0, max_value=MAX_GPUS)
    cooldown = forms.IntegerField(label=_("Cooldown (minutes)"), min_value=0, max_value=MAX_MINUTES)
    buffer = forms.IntegerField(label=_("Reclaim after (minutes below)"), required=False, min_value=0,
                                max_value=MAX_MINUTES)
    headroom = forms.IntegerField(label=_("Free GPUs kept when reclaiming"), required=False, min_value=0,
                                  max_value=MAX_GPUS)

    def __init__(self, *args, number: int, **kwargs):
        super().__init__(*args, prefix=f"r{number}", **kwargs)
        self.number = number
        for field in self.fields.values():
            field.widget.attrs.setdefault("class", "rule-input")

    @property
    def given(self) -> bool:
        """Whether any of its fields was filled in (an empty rule set is simply not replayed)."""
        return self.is_bound and any((self.data.get(self.add_prefix(key)) or "").strip() for key in RULE_KEYS)

    def clean(self):
        data = super().clean()
        up, down = data.get("up"), data.get("down")
        if up is not None and down is not None and not down < up:
            self.add_error("down", THRESHOLD_RULE)
        low, high = data.get("min"), data.get("max")
        if low is not None and high is not None and low > high:
            self.add_error("max", BOUNDS_RULE)
        return data

    def rule(self) -> RuleSet:
        data = self.cleaned_data
        return RuleSet(
            name=data["name"] or str(_("Rule set %(n)s") % {"n": self.number}), metric=data["metric"] or MEMORY,
            up_pct=data["up"], down_pct=data["down"], group=data["group"], minimum=data["min"], maximum=data["max"],
            cooldown_minutes=data["cooldown"], buffer_minutes=data["buffer"] or 0, headroom=data["headroom"])


class BacktestForm(forms.Form):
    """The scope, the GPU model and the period; the rule sets are :attr:`rule_forms`."""

    pool = forms.ChoiceField(label=_("Pool"), required=False, error_messages={"invalid_choice": POOL_RULE},
                             widget=QuickSelect)
    team = forms.ModelChoiceField(label=_("Team"), queryset=Team.objects.none(), to_field_name="slug", required=False,
                                  empty_label="—", error_messages={"invalid_choice": TEAM_RULE}, widget=QuickSelect)
    gpu_model = forms.ModelChoiceField(
        label=_("GPU model"), queryset=GpuModel.objects.only("id", "short_name").order_by("short_name"),
        to_field_name="short_name", error_messages={"invalid_choice": MODEL_RULE}, widget=QuickSelect)
    start = forms.DateField(label=_("First day"), input_formats=["%Y-%m-%d"], error_messages={"invalid": DATE_RULE},
                            widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"))
    end = forms.DateField(label=_("Last day"), input_formats=["%Y-%m-%d"], error_messages={"invalid": DATE_RULE},
                          widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"))

    def __init__(self, data, *, user, now: datetime):
        super().__init__(data)
        self.user, self.now = user, now
        self.fields["team"].queryset = backtest_teams(user)
        pools = list(Node.objects.pools()) if sees_every_scope(user) else []
        self.fields["pool"].choices = [("", "—"), *((p, p) for p in pools)]
        today = business_today(now=now)
        for name in ("start", "end"):
            self.fields[name].widget.attrs.update(min=self.first_day().isoformat(), max=today.isoformat())
        self.rule_forms = [RuleForm(data, number=n) for n in range(1, MAX_RULES + 1)]

    def first_day(self) -> date:
        """The first day with minute history kept (``TELEMETRY_MINUTE_RETENTION_DAYS``), within the window."""
        kept = business_today(now=self.now) - timedelta(days=settings.TELEMETRY_MINUTE_RETENTION_DAYS)
        return max(kept, WINDOW_START.date())

    @property
    def given_rules(self) -> list[RuleForm]:
        return [form for form in self.rule_forms if form.given]

    def clean(self):
        data = super().clean()
        if bool(data.get("pool")) == bool(data.get("team")) and not self.has_error("pool") and not self.has_error("team"):
            self.add_error("team" if data.get("pool") else "pool", SCOPE_RULE)
        first, last = data.get("start"), data.get("end")
        today = business_today(now=self.now)
        if first and last:
            if first > last:
                self.add_error("end", ORDER_RULE)
            elif (last - first).days + 1 > MAX_DAYS:
                self.add_error("end", LENGTH_RULE % {"days": MAX_DAYS})
            elif first < WINDOW_START.date() or last > today:
                self.add_error("end" if last > today else "start", WINDOW_RULE)
            elif first < self.first_day():
                self.add_error("start", RETENTION_RULE % {"days": settings.TELEMETRY_MINUTE_RETENTION_DAYS,
                                                          "first": self.first_day().isoformat()})
        given = self.given_rules
        if not 1 <= len(given) <= MAX_RULES:
            self.add_error(None, COUNT_RULE)
        return data

    def is_valid(self) -> bool:
        valid = super().is_valid()
        return all([form.is_valid() for form in self.given_rules]) and valid

    @property
    def scope_missing(self) -> bool:
        """A pool or team refused as unknown (or not the viewer's: the same answer): the page says 404."""
        return any(error.code == "invalid_choice" for name in ("pool", "team")
                   for error in self.errors.as_data().get(name, []))

    def scope(self) -> Scope:
        data = self.cleaned_data
        return Scope(start=business_day_bounds(data["start"])[0], end=business_day_bounds(data["end"])[1],
                     gpu_model_id=data["gpu_model"].pk, pool=data.get("pool") or None,
                     team_id=data["team"].pk if data.get("team") else None)

    def rules(self) -> list[RuleSet]:
        return [form.rule() for form in self.given_rules]

    def error_list(self) -> list[tuple[str, str]]:
        """(where, message) of every refusal, the rule sets' named by their number and field label."""
        out = []
        for name, errors in self.errors.items():
            label = str(self.fields[name].label) if name in self.fields else str(_("Rule sets"))
            out.extend((label, str(error)) for error in errors)
        for form in self.given_rules:
            for name, errors in form.errors.items():
                where = _("Rule set %(n)s") % {"n": form.number}
                label = f"{where} · {form.fields[name].label}" if name in form.fields else str(where)
                out.extend((label, str(error)) for error in errors)
        return out


@dataclass(frozen=True)
class Preset:
    """A named starting point: three rule sets from cautious to eager."""

    key: str
    name: object
    values: dict


PRESET_RULES = (
    Preset("conservative", _("Conservative"), {"metric": MEMORY, "up": 70, "down": 10, "group": 8, "min": 8,
                                               "max": 64, "cooldown": 60, "buffer": 120, "headroom": 0}),
    Preset("balanced", _("Balanced"), {"metric": MEMORY, "up": 80, "down": 20, "group": 8, "min": 8, "max": 64,
                                       "cooldown": 30, "buffer": 30}),
    Preset("aggressive", _("Aggressive"), {"metric": UTILIZATION, "up": 85, "down": 30, "group": 8, "min": 0,
                                           "max": 64, "cooldown": 10, "buffer": 0}),
)


def preset_data(user, *, now: datetime) -> dict[str, str]:
    """The page's parameters when it is opened with none: last full business month, the team (of those ``user``
    may backtest) and GPU model with the most card-hours held in it, and the three :data:`PRESET_RULES`."""
    first = previous_month(business_today(now=now))
    last = month_days(first)[1] - timedelta(days=1)
    teams = backtest_teams(user)
    top = (DailyUsage.objects.filter(day__gte=first, day__lte=last, state__in=ALLOCATED_STATES, team__in=teams)
           .values_list("team__slug", "gpu__model__short_name").annotate(ticks=Sum("ticks")).order_by("-ticks").first())
    if top is None:
        team = teams.first()
        model = GpuModel.objects.order_by("short_name").first()
        top = (team.slug if team else "", model.short_name if model else "", 0)
    data = {"team": top[0], "gpu_model": top[1], "start": first.isoformat(), "end": last.isoformat()}
    for number, preset in enumerate(PRESET_RULES, start=1):
        data[f"r{number}-name"] = str(preset.name)
        for key, value in preset.values.items():
            data[f"r{number}-{key}"] = str(value)
    return data


def rule_text_data(texts: list[str], number_from: int = 1) -> dict[str, str]:
    """``["metric=memory,up=80,…", …]`` (the command's ``--rule``) as the form's ``r<n>-<key>`` fields; a key
    the form does not know raises ``ValueError`` naming it."""
    data = {}
    for number, text in enumerate(texts, start=number_from):
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in RULE_KEYS:
                raise ValueError(f"rule {number}: {part!r} is not one of {', '.join(k + '=' for k in RULE_KEYS)}")
            data[f"r{number}-{key}"] = value.strip()
    return data

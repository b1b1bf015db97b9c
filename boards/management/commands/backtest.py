"""``manage.py backtest``: the threshold backtest (issue 19) from the command line, with the page's rules and
refusals (boards/backtest/forms.py) and an operator's view (every pool and team). Prints the side-by-side table;
``--csv FILE`` writes the page's CSV."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounting.money.exports import write_csv
from boards.backtest.forms import BacktestForm, preset_data, rule_text_data
from boards.backtest.report import CSV_COLUMNS, csv_rows, run_backtest

ROWS = (
    ("card-hours held", lambda f: f.card_hours),
    ("card-hours saved", lambda f: f.saved_card_hours if f.rule else "—"),
    ("cost saved", lambda f: "—" if not f.rule or f.saved_cost is None else f.saved_cost),
    ("mean GPUs", lambda f: f.mean_gpus),
    ("peak GPUs", lambda f: f.peak_gpus),
    ("minutes under-provisioned", lambda f: f.outcome.under_minutes),
    ("scale events (up/down)", lambda f: f"{f.outcome.scale_events} ({f.outcome.scale_ups}/{f.outcome.scale_downs})"),
    ("scale-downs cutting jobs", lambda f: f.outcome.cuts if f.rule else "—"),
    ("longest cut (minutes)", lambda f: f.outcome.longest_cut_minutes),
    ("minutes at a bound", lambda f: f.outcome.bound_minutes if f.rule else "—"),
)


class Command(BaseCommand):
    help = ("Replay one to four scaling rule sets over a pool's or a team's recorded minutes of one GPU model and "
            "compare them with what was actually held (default: last full month, the three preset rule sets).")

    def add_arguments(self, parser):
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--pool", help="a node pool")
        scope.add_argument("--team", help="a team's slug")
        parser.add_argument("--gpu-model", help="a GPU model's short name, e.g. H200")
        parser.add_argument("--start", help="first business day, YYYY-MM-DD (default: last month's first)")
        parser.add_argument("--end", help="last business day, YYYY-MM-DD, included (default: last month's last)")
        parser.add_argument("--rule", action="append", default=[], metavar="SPEC",
                            help="a rule set, repeated 1-4 times: metric=memory|utilization,up=80,down=20,group=8,"
                                 "min=8,max=64,cooldown=30[,buffer=MIN][,headroom=GPUS][,name=TEXT]")
        parser.add_argument("--csv", metavar="FILE", help="also write the figures as CSV to FILE")

    def handle(self, *args, pool=None, team=None, gpu_model=None, start=None, end=None, rule=(), csv=None, **options):
        now = timezone.now()
        data = preset_data(None, now=now)
        if rule:
            data = {k: v for k, v in data.items() if not k.startswith("r")}
            try:
                data |= rule_text_data(list(rule))
            except ValueError as error:
                raise CommandError(f"--rule: {error}") from None
        if pool:
            data["pool"], data["team"] = pool, ""
        elif team:
            data["team"] = team
        for key, value in (("gpu_model", gpu_model), ("start", start), ("end", end)):
            if value:
                data[key] = value
        form = BacktestForm(data, user=None, now=now)
        if not form.is_valid():
            raise CommandError("; ".join(f"{where}: {message}" for where, message in form.error_list()))
        report = run_backtest(form.scope(), form.rules(), now=now)
        names = ["actually held", *(f.name for f in report.rules)]
        width = max(len(label) for label, _value in ROWS) + 2
        self.stdout.write(f"{'':<{width}}" + "".join(f"{name:>18}" for name in names))
        for label, value in ROWS:
            self.stdout.write(f"{label:<{width}}" + "".join(f"{value(f)!s:>18}" for f in report.columns))
        self.stdout.write(f"({report.recorded.minutes:,} minutes replayed in {report.seconds:.2f} s; "
                          f"cost in {report.currency})")
        if csv:
            with open(csv, "w", newline="", encoding="utf-8") as stream:
                write_csv(CSV_COLUMNS, csv_rows(report), stream)
            self.stdout.write(f"CSV written to {csv}")

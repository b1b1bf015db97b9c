"""Jobs from Slurm's accounting: the output of

    sacct --allocations --duplicates --parsable2 \\
          --format=JobID,JobIDRaw,User,Account,Partition,Submit,Start,End,State,AllocTRES,NodeList,ElapsedRaw

(``|``-separated, a header line; ``JobName``, ``ReqTRES`` and ``Priority`` are read too when present).
``--duplicates`` lists every run of a requeued job, not only the last.

How rows become runs (source ``slurm``, so a run the prolog hook reported through the API is the same row):
- one row per allocation: job steps (``123.batch``, ``123.0``, ``123.extern``) and pending array
  ranges (``123_[5-10]``) are skipped; array tasks are jobs of their own (``123_4``), as are
  heterogeneous components (``123+0``); a requeued job's runs differ by their start time.
- GPUs are counted once from AllocTRES: ``gres/gpu=N``, else the sum of typed ``gres/gpu:TYPE=N``
  (``gres/gpumem`` and ``gres/gpuutil`` are not GPUs). A single TYPE names the model (a GpuModel's
  NVML name, ``_`` for spaces, short name or alias, any case: ``cluster.inventory.sync.GpuModelCatalogue``;
  a type that names none creates a model of that name, reported); no type: the model of the nodes in
  NodeList when they have one. A job that never started counts the GPUs it asked for (ReqTRES).
- ``Unknown``/``None``/empty times: never started (Start), still running (End; a finished run
  without End ends at Start + ElapsedRaw). Times without an offset are read in ``tz`` (the business
  time zone by default); a repeated wall-clock hour at a DST change reads as its first occurrence.
  Times lie in the supported window, at most a day after now (core.timewindow).
- the Account maps to a team through a Slurm-account TeamIdentity (and its project), else a team
  whose slug is the account, else the User through a unix-user TeamIdentity (the jobs API's order,
  so a run a hook reported and its sacct row agree). A capture without an Account column (some sites'
  formats) maps every row by its User. Unmapped: with ``create_teams`` and an account, a team made
  (slug and cost centre from the account) with its identity; else with ``default_team`` that team;
  else the row is rejected and the account (or, without one, the user) listed once.
- NodeList names at most :data:`MAX_HOSTS` hosts, counted before any range is expanded: ``n[0-99999999]``
  is a rejected row, not minutes and gigabytes of host names.
- lines are read by ``core.import_lines``: bytes that are not UTF-8 are replaced and the line
  reported as a warning (the row kept); a NUL byte or an over-long line rejects its row.
- sacct knows nodes, not GPU indices, so runs are unplaced; but a run already placed (by the prolog
  hook) keeps its GPUs when they add up to the GPU count and lie on NodeList's nodes.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from cluster.jobs.imports.shared import (
    GPU_COUNT_MAX,
    ImportRefused,
    JobImportReport,
    Lookups,
    new_team,
    parse_int,
    write_checked,
)
from cluster.jobs.services import JobInput, scheduler_team, unplaced_share
from cluster.models import Allocation, AllocationOrigin, Gpu, IdentityKind, JobSource, JobState, TeamIdentity
from core.import_lines import ImportLines
from core.timewindow import WINDOW_TEXT, check_job_time
from teams.models import Team

REQUIRED = ("JobID", "User", "Submit", "Start", "End", "State", "AllocTRES")
OPTIONAL = ("Account", "JobIDRaw", "Partition", "NodeList", "ElapsedRaw", "JobName", "ReqTRES", "Priority")
FORMAT = ("JobID", "JobIDRaw", "User", "Account", "Partition", "Submit", "Start", "End", "State", "AllocTRES",
          "NodeList", "ElapsedRaw", "JobName", "ReqTRES", "Priority")  # the --format to ask sacct for
MAX_HOSTS = 100_000  # hosts one NodeList may name (Slurm's largest clusters have tens of thousands)
NO_TIME = frozenset({"", "unknown", "none"})
STATES = {
    "PENDING": JobState.PENDING, "REQUEUE_HOLD": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING, "CONFIGURING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING, "STOPPED": JobState.RUNNING, "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING, "STAGE_OUT": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED, "TIMEOUT": JobState.FAILED, "NODE_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED, "BOOT_FAIL": JobState.FAILED, "DEADLINE": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED, "REVOKED": JobState.CANCELLED,
    "PREEMPTED": JobState.PREEMPTED,
    "REQUEUED": JobState.REQUEUED, "REQUEUE_FED": JobState.REQUEUED, "SPECIAL_EXIT": JobState.REQUEUED,
}
NO_NODES = frozenset({"", "none assigned", "(null)"})
CHUNK = 5_000


def import_sacct(path: Path, *, tz: str | None = None, create_teams: bool = False, strict: bool = False,
                 default_team: str | None = None, now: datetime | None = None) -> JobImportReport:
    """Import sacct output; bad rows are reported by line, the rest kept unless ``strict``.
    ``default_team``: the slug of the team that rows mapping to no team go to."""
    zone = ZoneInfo(tz or settings.CARDHOUR_BUSINESS_TIME_ZONE)
    report = JobImportReport()
    with transaction.atomic():
        lookups = Lookups()
        fallback = None
        if default_team:
            fallback = lookups.teams.get(default_team)
            if fallback is None:
                raise ImportRefused(f"--default-team: no team with slug {default_team!r}")
            report.default_team = default_team
        rows = list(read_sacct(path, zone=zone, lookups=lookups, report=report, create_teams=create_teams,
                               default_team=fallback, now=now))
        _keep_known_placement([data for _line, data in rows])
        write_checked(rows, report, strict=strict, lookups=lookups)
    return report


def read_sacct(path: Path, *, zone: ZoneInfo, lookups: Lookups, report: JobImportReport,
               create_teams: bool = False, default_team: Team | None = None,
               now: datetime | None = None) -> Iterator[tuple[int, JobInput]]:
    """The file's runs, line by line; steps go to ``report.skipped``, bad rows to ``report.rejected``
    (``create_teams``: an unmapped account's team is made on the way, saved by ``Lookups.save_new``;
    ``default_team``: where rows that map to no team go)."""
    return _Reader(zone=zone, lookups=lookups, report=report, create_teams=create_teams,
                   default_team=default_team, now=now or timezone.now()).rows(path)


class _Reader:
    """One file's reading: the account and user identities are loaded once."""

    def __init__(self, *, zone: ZoneInfo, lookups: Lookups, report: JobImportReport, create_teams: bool,
                 default_team: Team | None, now: datetime) -> None:
        self.zone, self.lookups, self.report, self.create_teams = zone, lookups, report, create_teams
        self.default_team, self.now = default_team, now
        self.accounts: dict[str, tuple] = {}
        self.users: dict[str, tuple] = {}
        kinds = {IdentityKind.SLURM_ACCOUNT: self.accounts, IdentityKind.UNIX_USER: self.users}
        for i in TeamIdentity.objects.filter(kind__in=kinds).select_related("team", "project"):
            kinds[i.kind][i.name] = (i.team, i.project)

    def rows(self, path: Path) -> Iterator[tuple[int, JobInput]]:
        lines = ImportLines(path)
        header: list[str] | None = None
        for line, text in enumerate(lines, start=1):
            text = text.rstrip("\r\n")
            if header is not None and line in lines.bad:
                self.report.rows_read += 1
                self.report.rejected.append((line, lines.bad[line]))
                continue
            if not text.strip():
                continue
            fields = text.split("|")
            if header is None:
                header = self._header(fields)
                self.report.encoding = lines.encoding
                continue
            self.report.rows_read += 1
            if fields[-1] == "" and len(fields) == len(header) + 1:
                fields.pop()  # --parsable (not parsable2) ends every line with a '|'
            if len(fields) != len(header):
                self.report.rejected.append((line, f"{len(fields)} fields, the header has {len(header)}"))
                continue
            cells = dict(zip(header, (f.strip() for f in fields), strict=True))
            cells.setdefault("Account", "")
            job_id = cells["JobID"]
            if "." in job_id:
                self.report.skipped["job steps"] += 1
            elif "[" in job_id:
                self.report.skipped["pending array ranges"] += 1
            else:
                self.report.warnings.extend((line, warning) for warning in lines.replacements(line, line))
                try:
                    yield line, self._job(cells)
                except ValueError as error:
                    self.report.rejected.append((line, str(error)))
        if header is None:
            raise ImportRefused("the file is empty: no sacct header line")

    def _header(self, fields: list[str]) -> list[str]:
        known = {name.lower(): name for name in (*REQUIRED, *OPTIONAL)}
        header = [known.get(name.strip().lower(), name.strip()) for name in fields]
        if header and header[-1] == "":
            header.pop()
        missing = [name for name in REQUIRED if name not in header]
        if missing:
            raise ImportRefused(f"the sacct header lacks {', '.join(missing)} (use --parsable2 --format={','.join(FORMAT)})")
        return header

    def _job(self, cells: dict[str, str]) -> JobInput:
        job_id = cells["JobID"]
        if not job_id:
            raise ValueError("JobID: empty")
        state = self._state(cells["State"])
        start = self._time(cells["Start"], "Start")
        end = self._time(cells["End"], "End")
        elapsed = cells.get("ElapsedRaw", "")
        if end is None and start is not None and state not in (JobState.RUNNING, JobState.PENDING) and elapsed.isdigit():
            if len(elapsed) > 10:  # beyond 300 years: no real run, and Start + it could overflow
                raise ValueError(f"ElapsedRaw: {elapsed[:20]!r} ends the run outside the supported window {WINDOW_TEXT}")
            end = check_job_time(start + timedelta(seconds=int(elapsed)), field="End (Start + ElapsedRaw)", now=self.now)
        nodes = "" if cells.get("NodeList", "").lower() in NO_NODES else cells["NodeList"]
        hosts = hostlist_size(nodes)
        if hosts > MAX_HOSTS:
            raise ValueError(f"NodeList: {nodes[:60]!r} names {hosts:,} hosts, more than {MAX_HOSTS:,}")
        gpu_count, gpu_type = gpus_from_tres(cells["AllocTRES"])
        if not gpu_count and start is None:
            gpu_count, gpu_type = gpus_from_tres(cells.get("ReqTRES", ""))
        team, project = self._team(cells["Account"], cells["User"])
        return JobInput(
            source=JobSource.SLURM, external_id=job_id, start_time=start, team=team, project=project,
            name=cells.get("JobName", ""), user=cells["User"], account=cells["Account"],
            partition=cells.get("Partition", ""), priority=parse_int(cells.get("Priority", ""), "Priority"),
            gpu_count=gpu_count, gpu_model=self._model(gpu_type, nodes) if gpu_count else None, state=state,
            submit_time=self._time(cells["Submit"], "Submit"), end_time=end, node_list=nodes,
        )

    def _state(self, text: str) -> str:
        # "CANCELLED by 1234"; a trailing '+' where sacct truncated the column.
        word = text.split(" ", 1)[0].rstrip("+").upper()
        if word not in STATES:
            raise ValueError(f"State: {text!r} is not a Slurm job state this import knows")
        return STATES[word]

    def _time(self, text: str, column: str) -> datetime | None:
        if text.lower() in NO_TIME:
            return None
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{column}: {text[:40]!r} is not a time (sacct prints 2026-11-02T08:00:00)") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=self.zone)
        try:
            moment = moment.astimezone(UTC)
        except OverflowError:
            raise ValueError(f"{column}: {text[:40]!r} is outside the supported window {WINDOW_TEXT}") from None
        return check_job_time(moment, field=column, now=self.now)

    def _model(self, gpu_type: str | None, nodes: str):
        if gpu_type:
            try:
                return self.lookups.model(gpu_type)
            except ValueError as error:
                raise ValueError(f"AllocTRES: GPU type {error}") from None
        models = set()
        for hostname in expand_hostlist(nodes):
            gpus = self.lookups.node_gpus(hostname)
            models |= {gpu.model for gpu in (gpus or {}).values()}
        return models.pop() if len(models) == 1 else None

    def _team(self, account: str, user: str):
        """(team, project) of the account's Slurm-account identity, else of the team whose slug the
        account is, else of the user's unix-user identity: as the jobs API finds a hook's team. Then,
        for an unmapped row: a team made for its account (``create_teams``), else the default team."""
        teams = self.lookups.teams
        found = scheduler_team(
            account, user, by_account=self.accounts.get,
            by_slug=lambda slug: (teams[slug], None) if slug in teams else None, by_user=self.users.get,
        )
        if found:
            return found
        if account and self.create_teams:
            self.accounts[account] = (self._create_team(account), None)
            return self.accounts[account]
        if self.default_team is not None:
            self.report.default_team_rows += 1
            return self.default_team, None
        if account:
            self.report.unmapped_accounts[account] += 1
            raise ValueError(f"Account: {account!r} maps to no team")
        self.report.unmapped_users[user] += 1
        raise ValueError(f"User: {user!r} maps to no team (no Account; map the user with a unix user identity, "
                         "or give --default-team)")

    def _create_team(self, account: str) -> Team:
        """A team for an account (or the team its slugified name already is), and the identity that maps it;
        a new team is unsaved until a row using it is written (Lookups.save_new)."""
        slug = slugify(account)[:50] or "account"
        team = self.lookups.teams.get(slug)
        if team is None:
            team = self.lookups.teams[slug] = new_team(slug, account if not Team.objects.filter(name=account).exists()
                                                       else f"{account} (Slurm)")
        self.lookups.identities.append((IdentityKind.SLURM_ACCOUNT, account, team))
        return team


def gpus_from_tres(tres: str) -> tuple[Decimal, str | None]:
    """(GPU count, GPU type or None) from a TRES list such as ``cpu=8,gres/gpu:h200=4,gres/gpu=4``."""
    untyped, typed = None, {}
    for item in tres.split(","):
        name, _eq, value = item.strip().partition("=")
        if name != "gres/gpu" and not name.startswith("gres/gpu:"):
            continue
        if not value.isdigit():
            raise ValueError(f"AllocTRES: {item!r} is not a whole GPU count")
        if name == "gres/gpu":
            untyped = int(value)
        else:
            typed[name.removeprefix("gres/gpu:")] = int(value)
    count = Decimal(untyped if untyped is not None else sum(typed.values()))
    if count > GPU_COUNT_MAX:
        raise ValueError(f"AllocTRES: {count} GPUs is out of range")
    return count, (next(iter(typed)) if len(typed) == 1 else None)


def _items(text: str) -> list[str]:
    """The comma-separated items of a host list, commas inside brackets kept."""
    items: list[str] = []
    depth, item = 0, ""
    for char in text + ",":
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            if item:
                items.append(item)
            item = ""
        else:
            item += char
    return items


def hostlist_size(text: str) -> int:
    """How many host names :func:`expand_hostlist` would give, counted without expanding any range."""
    return sum(_count_one(item) for item in _items(text))


def _count_one(item: str) -> int:
    match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
    if not match:
        return 1
    _prefix, ranges, rest = match.groups()
    count = 0
    for part in ranges.split(","):
        low, _dash, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return 1  # read as one literal name, as _expand_one does
        if len(low) > 18 or len(high) > 18:
            return 10**18  # beyond any cap, without converting a huge number
        count += max(0, int(high or low) - int(low) + 1)
    return count * _count_one(rest)


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list (``gpu[01-03,07],login1``) as host names; more than
    :data:`MAX_HOSTS` names is a ValueError, raised before anything is expanded."""
    size = hostlist_size(text)
    if size > MAX_HOSTS:
        raise ValueError(f"NodeList: names {size:,} hosts, more than {MAX_HOSTS:,}")
    hosts: list[str] = []
    for item in _items(text):
        hosts.extend(_expand_one(item))
    return hosts


def _expand_one(item: str) -> list[str]:
    match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
    if not match:
        return [item]
    prefix, ranges, rest = match.groups()
    names = []
    for part in ranges.split(","):
        low, _dash, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return [item]
        names.extend(f"{prefix}{n:0{len(low)}d}" for n in range(int(low), int(high or low) + 1))
    return [f"{name}{tail}" for name in names for tail in _expand_one(rest)]


def _keep_known_placement(jobs: list[JobInput]) -> None:
    """Give an unplaced sacct run the GPUs a stored run of the same key already holds (reported by
    the prolog hook), when they add up to its GPU count and lie on its nodes."""
    ids = sorted({data.external_id for data in jobs if data.gpu_count > 0 and data.start_time})
    placed = defaultdict(list)
    for first in range(0, len(ids), CHUNK):
        allocations = (
            Allocation.objects.filter(
                job__source=JobSource.SLURM, job__external_id__in=ids[first : first + CHUNK],
                origin=AllocationOrigin.SCHEDULER, gpu__isnull=False,
            ).select_related("gpu__node", "job").order_by("job_id", "gpu__index")
        )
        for allocation in allocations:
            placed[(allocation.job.external_id, allocation.job.start_time)].append(allocation.gpu)
    for data in jobs:
        gpus: list[Gpu] = placed.get((data.external_id, data.start_time), [])
        if not gpus or sum(gpu.share for gpu in gpus) != unplaced_share(data.gpu_count):
            continue
        if data.node_list and not {gpu.node.hostname for gpu in gpus} <= set(expand_hostlist(data.node_list)):
            continue
        data.gpus = gpus

"""What the job importers share (the package docstring has the rules): the report, the names in files
resolved to rows (``Lookups``), the cell parsers both use, and the checked, set-based write.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from cluster.choices import GpuStatus
from cluster.inventory.sync import GpuModelCatalogue, GpuModelNames, check_gpu_model_name
from cluster.jobs.services import JobInput
from cluster.jobs.write import jobs_write
from cluster.models import Gpu, GpuModel, Job, JobState, Node, TeamIdentity
from cluster.telemetry.importer import ImportRefused, listed
from teams.models import Project, Team
from teams.selectors import project_name_taken

__all__ = ["ImportRefused", "JobImportReport", "Lookups", "new_team", "parse_int", "write_checked"]

STATES = frozenset(JobState.values)  # a constant: JobState.values builds a new list at each use
FINISHED = STATES - {JobState.PENDING, JobState.RUNNING}
GPU_COUNT_MAX = Decimal("999999.999")  # Job.gpu_count: 9 digits, 3 decimals
INT4 = 2**31 - 1
TEXT_LIMITS = {
    name: Job._meta.get_field(name).max_length
    for name in ("external_id", "name", "user", "account", "partition", "node_list")
}


@dataclass
class JobImportReport:
    """What an import did, row by row where it matters (line numbers count the header as line 1)."""

    rows_read: int = 0
    imported: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason → rows
    rejected: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[tuple[int, str]] = field(default_factory=list)  # rows kept with a caveat (bytes replaced)
    unmapped_accounts: Counter = field(default_factory=Counter)  # sacct account → rows rejected
    unmapped_users: Counter = field(default_factory=Counter)  # sacct user (no account) → rows rejected
    default_team_rows: int = 0  # sacct rows sent to --default-team
    default_team: str = ""
    teams_created: list[str] = field(default_factory=list)
    projects_created: list[str] = field(default_factory=list)  # "team/project"
    models_created: list[str] = field(default_factory=list)
    encoding: str = "utf-8"

    def summary(self) -> str:
        lines = [
            f"rows read {self.rows_read}, imported {self.imported}, updated {self.updated}, unchanged "
            f"{self.unchanged}, skipped {sum(self.skipped.values())}, rejected {len(self.rejected)}"
        ]
        if self.encoding != "utf-8":
            lines.append(f"read as {self.encoding.upper()} (it had a byte-order mark)")
        if self.skipped:
            lines.append("skipped: " + ", ".join(f"{reason} {n}" for reason, n in sorted(self.skipped.items())))
        if self.unmapped_accounts:
            lines.append("unmapped accounts (rows rejected; map them with a Slurm account identity, or --create-teams): "
                         + ", ".join(f"{account or '(empty)'} ({n})" for account, n in sorted(self.unmapped_accounts.items()))
                         + "; or send such rows to one team with --default-team SLUG")
        if self.unmapped_users:
            lines.append("unmapped users (no account; rows rejected; map them with a unix user identity, or "
                         "--default-team): " + ", ".join(f"{user or '(empty)'} ({n})" for user, n in sorted(self.unmapped_users.items())))
        if self.default_team_rows:
            lines.append(f"rows sent to the default team {self.default_team}: {self.default_team_rows}")
        if self.teams_created:
            lines.append("teams created: " + listed(self.teams_created))
        if self.projects_created:
            lines.append("projects created: " + listed(self.projects_created))
        if self.models_created:
            lines.append("GPU models created (memory unknown; if one is a known model under another name, add a GPU "
                         "model alias in the admin before importing): " + listed(self.models_created))
        return "\n".join(lines)

    def refusal(self) -> str:
        shown = "; ".join(f"line {line}: {reason}" for line, reason in self.rejected[:20])
        more = f" (and {len(self.rejected) - 20} more)" if len(self.rejected) > 20 else ""
        return f"--strict: {len(self.rejected)} bad row(s), nothing imported: {shown}{more}"


class Lookups:
    """Names in files → rows, each loaded once per import (a 100,000-row file names a few dozen).

    Teams, projects and GPU models that a file names and that do not exist come back unsaved (pk
    None); :meth:`save_new` saves those the written rows use, so a rejected row creates nothing."""

    def __init__(self, *, create_teams: bool = False) -> None:
        self.create_teams = create_teams
        self.teams = {team.slug: team for team in Team.objects.all()}
        self.projects = {(p.team.slug, p.slug): p for p in Project.objects.select_related("team")}
        self.models = GpuModelCatalogue()
        self.model_names = GpuModelNames()
        self.identities: list[tuple[str, str, Team]] = []  # (kind, name, team) to record for saved teams
        self._node_gpus: dict[str, dict[int, Gpu] | None] = {}

    def model(self, text: str) -> GpuModel:
        """A GPU model by NVML name, short name or alias, any case (``_`` and ``-`` read as spaces for NVML
        names); an unknown name gives an unsaved model of that name, created by :meth:`save_new`."""
        found = self.models.match(text)
        if found is None:
            name = check_gpu_model_name(text)
            found = GpuModel(name=name, short_name=name[:32], memory_mib=0)
            self.models.add(name, found)
        return found

    def team(self, slug: str, *, column: str = "team") -> Team:
        """The team with this slug; with ``create_teams`` an unsaved new one, else a ValueError."""
        if not slug:
            raise ValueError(f"{column}: is required")
        team = self.teams.get(slug)
        if team is None:
            if not self.create_teams:
                raise ValueError(f"{column}: no team with slug {slug!r} (--create-teams creates it)")
            if not SLUG.fullmatch(slug):
                raise ValueError(f"{column}: {slug[:60]!r} is not a slug (letters, digits, '-' and '_', at most 50)")
            team = self.teams[slug] = new_team(slug, slug)
        return team

    def project(self, team: Team, slug: str) -> Project | None:
        """The team's project with this slug (empty: none); with ``create_teams`` an unsaved new one."""
        if not slug:
            return None
        project = self.projects.get((team.slug, slug))
        if project is None:
            if not self.create_teams:
                raise ValueError(f"project: team {team.slug} has no project with slug {slug!r}")
            if not SLUG.fullmatch(slug):
                raise ValueError(f"project: {slug[:60]!r} is not a slug (letters, digits, '-' and '_', at most 50)")
            project = self.projects[(team.slug, slug)] = Project(team=team, slug=slug, name=slug)
        return project

    def save_new(self, jobs: Iterable[JobInput], report: JobImportReport) -> None:
        """Save the unsaved teams, projects and GPU models that ``jobs`` use (and the identities of
        saved teams), listing them in ``report``; point the jobs at the saved GPU models."""
        saved_models: dict[int, GpuModel] = {}
        for data in jobs:
            team = data.team
            if team is not None and team.pk is None:
                if Team.objects.filter(name=team.name).exists():
                    team.name = f"{team.name} (imported)"[:100]
                team.save()
                report.teams_created.append(team.slug)
            project = data.project
            if project is not None and project.pk is None:
                project.team = project.team  # the team may have been saved just now: take its id
                if project_name_taken(project.team, project.name):
                    project.name = f"{project.name} ({project.slug})"[:100]
                project.save()
                report.projects_created.append(f"{project.team.slug}/{project.slug}")
            model = data.gpu_model
            if model is not None and model.pk is None:
                if id(model) not in saved_models:
                    saved_models[id(model)] = self.model_names.resolve(model.name)
                data.gpu_model = saved_models[id(model)]
        for kind, name, team in self.identities:
            if team.pk is not None:
                TeamIdentity.objects.get_or_create(kind=kind, name=name, defaults={"team": team})
        report.models_created = list(self.model_names.created)

    def node_gpus(self, hostname: str) -> dict[int, Gpu] | None:
        """A node's whole GPUs by NVML index (None: unknown node). Where a retired GPU and its
        replacement share an index, the one in service wins."""
        if hostname not in self._node_gpus:
            node = Node.objects.filter(hostname=hostname).first()
            gpus = None
            if node is not None:
                # As the jobs API ranks them: in service, then missing, then retired; newest first.
                rank = {GpuStatus.ACTIVE: 0, GpuStatus.MAINTENANCE: 0, GpuStatus.MISSING: 1}
                gpus = {}
                found = Gpu.objects.filter(node=node, mig_parent__isnull=True).select_related("model")
                for gpu in sorted(found, key=lambda g: (rank.get(g.status, 2), -g.pk)):
                    gpus.setdefault(gpu.index, gpu)
            self._node_gpus[hostname] = gpus
        return self._node_gpus[hostname]


SLUG = re.compile(r"[-a-zA-Z0-9_]{1,50}")


def new_team(slug: str, name: str) -> Team:
    """An unsaved team for a name a file gives (its cost centre derived from the name)."""
    cost_centre = re.sub(r"[^A-Za-z0-9._/-]", "-", name).lstrip("._/-")[:32] or slug[:32]
    return Team(name=name[:100], slug=slug, cost_centre=cost_centre)


# --- cells ---------------------------------------------------------------------------------------


def parse_int(text: str, column: str) -> int | None:
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{column}: {text!r} is not a whole number") from None
    if abs(value) > INT4:
        raise ValueError(f"{column}: {text!r} is out of range")
    return value


# --- checking and writing ------------------------------------------------------------------------

def import_problems(data: JobInput) -> list[str]:
    """``JobInput.problems()`` and what the database would refuse or an import should not store."""
    problems = [f"{name}: {rule}" for name, rule in data.problems().items()]
    for name, limit in TEXT_LIMITS.items():
        if len(getattr(data, name)) > limit:
            problems.append(f"{'job_id' if name == 'external_id' else name}: longer than {limit} characters")
    if data.state in FINISHED and data.start_time is not None and data.end_time is None:
        problems.append(f"end_time: a {data.state} run that started needs an end time (empty = still running)")
    return problems


def write_checked(rows: Iterable[tuple[int, JobInput]], report: JobImportReport, *, strict: bool,
                  lookups: Lookups | None = None) -> None:
    """Check every row, then write the good ones in file order (call inside a transaction), saving first
    the new teams, projects and GPU models of ``lookups`` that they use.
    ``strict``: any bad row refuses the whole file (ImportRefused), after every row is checked."""
    good = []
    for line, data in rows:
        problems = import_problems(data)
        if problems:
            report.rejected.append((line, "; ".join(problems)))
        else:
            good.append(data)
    report.rejected.sort()
    report.warnings.sort()
    if strict and report.rejected:
        raise ImportRefused(report.refusal())
    if lookups is not None:
        lookups.save_new(good, report)
    counts = jobs_write(good)
    report.imported, report.updated, report.unchanged = counts.created, counts.updated, counts.unchanged
    if counts.superseded:
        report.skipped["same run again later in the file"] += counts.superseded



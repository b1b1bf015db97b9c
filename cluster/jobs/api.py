"""The jobs API: role-scoped reads; create-or-update by scheduler hooks (service tokens), admins and leads."""

from django.db import IntegrityError
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.response import Response

from cluster.jobs.selectors import is_service_token, jobs_readable_by, teams_writable_by
from cluster.jobs.serializers import JobFilterSerializer, JobSerializer, JobWriteSerializer, with_allocations
from cluster.jobs.services import JobInput, Outcome, job_delete, job_upsert
from cluster.models import Job, JobSource
from core.api import ApiErrorSerializer, StrictJSONParser
from teams.models import Team
from teams.roles import is_admin

ERRORS = {
    400: OpenApiResponse(ApiErrorSerializer, description=_("A field breaks a rule; `detail` names it.")),
    403: OpenApiResponse(ApiErrorSerializer, description=_("Only admins, team leads and service tokens write jobs.")),
}


class JobWriters(permissions.BasePermission):
    """Every role reads (scoped by the queryset). Writes: service tokens and admins for any team, leads
    for the teams they lead (checked on the team field and on the job); engineers and finance never."""

    message = _("Only admins, team leads and service tokens write jobs.")

    def has_permission(self, request, view):
        if not request.user.is_authenticated:
            return False
        if request.method in permissions.SAFE_METHODS:
            return True
        if request.method == "DELETE":
            # Deleting a run is a person's correction, not a scheduler hook's report.
            self.message = _("Only admins and the leads of the job's team delete jobs.")
            return not is_service_token(request) and (
                is_admin(request.user) or Team.objects.led_by(request.user).exists())
        return is_service_token(request) or is_admin(request.user) or Team.objects.led_by(request.user).exists()

    def has_object_permission(self, request, view, job):
        if request.method in permissions.SAFE_METHODS:
            return True
        if job.source == JobSource.OBSERVED:
            self.message = _("Observed jobs are written by the system, not through the API.")
            return False
        return teams_writable_by(request).filter(pk=job.team_id).exists()


def upsert(data: JobInput) -> tuple[Job, Outcome]:
    try:
        return job_upsert(data)
    except IntegrityError as exc:
        # Two posts of a new run raced to insert it: the loser's retry finds the winner's row and updates it.
        if getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None) != "job_one_row_per_run":
            raise
        return job_upsert(data)


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Job runs the caller may see: admin and finance all teams', others their teams'; service tokens
    (scheduler hooks) every team's. Filters: ``team``, ``project``, ``user``, ``state``, ``gpu_model``,
    ``source``, ``started_after``, ``started_before``; ``ordering``."""

    serializer_class = JobSerializer
    permission_classes = [JobWriters]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    # JSON only: a form body turns every field it leaves out into an empty value, and a write merges
    # onto the stored run, so a missing field must stay missing.
    parser_classes = [StrictJSONParser]

    def get_queryset(self):
        jobs = with_allocations(jobs_readable_by(self.request))
        if self.action == "list":
            filters = JobFilterSerializer(data=self.request.query_params, context=self.get_serializer_context())
            filters.is_valid(raise_exception=True)
            jobs = filters.filter(jobs)
        return jobs

    @extend_schema(parameters=[JobFilterSerializer])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request=JobWriteSerializer,
        responses={
            201: OpenApiResponse(JobSerializer, description=_("A new run was recorded.")),
            200: OpenApiResponse(JobSerializer, description=_("The run was already recorded: updated or unchanged.")),
            **ERRORS,
        },
        description=_(
            "Create or update the run keyed by (source, job_id, start_time): posting the same facts twice "
            "changes nothing. Fields left out keep their stored values (a new run takes the defaults). "
            "`node` and `gpu_indices` place the allocations on those GPUs; without them a run is unplaced "
            "(gpu_count GPUs of gpu_model). Service tokens and admins write any team's jobs, leads their teams'."
        ),
    )
    def create(self, request, format=None):
        serializer = JobWriteSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        job, outcome = upsert(serializer.validated_data["job"])
        code = status.HTTP_201_CREATED if outcome == Outcome.CREATED else status.HTTP_200_OK
        return Response(self._row(job), status=code)

    @extend_schema(
        request=JobWriteSerializer,
        responses={200: JobSerializer, **ERRORS, 404: OpenApiResponse(ApiErrorSerializer)},
        description=_("Correct fields of one run (an end time, a state). source, job_id and start_time are "
                      "its key and cannot change."),
    )
    def partial_update(self, request, pk=None, format=None):
        job = self.get_object()
        serializer = JobWriteSerializer(job, data=request.data, partial=True, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        job, _outcome = upsert(serializer.validated_data["job"])
        return Response(self._row(job))

    @extend_schema(
        responses={204: None, 403: ERRORS[403], 404: OpenApiResponse(ApiErrorSerializer)},
        description=_("Delete one run and its allocations (a bad record: correct it by deleting it and posting "
                      "the right one). Admins, and leads for their teams' jobs; its usage leaves the daily "
                      "aggregates at the next aggregation."),
    )
    def destroy(self, request, pk=None, format=None):
        job_delete(job=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _row(self, job: Job) -> dict:
        return JobSerializer(with_allocations(Job.objects.filter(pk=job.pk)).get()).data

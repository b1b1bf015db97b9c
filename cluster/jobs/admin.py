from django import forms
from django.contrib import admin
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from cluster.jobs.services import job_allocations_follow, job_time_errors
from cluster.models import Allocation, Job, TeamIdentity
from core.timewindow import window_message


class AllocationInline(admin.TabularInline):
    model = Allocation
    extra = 0
    fields = ["gpu", "gpu_model", "share", "start", "end", "origin"]
    raw_id_fields = ["gpu"]

@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Correct or delete a job (issue 12): its times must lie in the supported window (jobs at most a day
    ahead), and its scheduler allocations follow its times, count and model, so the usage does too."""

    class JobAdminForm(forms.ModelForm):  # the admin's form factory adds the model and its fields
        def clean(self):
            cleaned = super().clean()
            for name, error in job_time_errors(cleaned, now=timezone.now()).items():
                self.add_error(name, window_message(error))
            start, end = cleaned.get("start_time"), cleaned.get("end_time")
            if start and end and end < start and "end_time" not in self.errors:
                self.add_error("end_time", _("is before start_time."))
            return cleaned

    form = JobAdminForm
    list_display = ["external_id", "source", "name", "user", "team", "state", "gpu_count", "start_time", "end_time"]
    list_filter = ["source", "state", "team"]
    search_fields = ["external_id", "name", "user"]
    list_select_related = ["team"]
    raw_id_fields = ["project"]
    inlines = [AllocationInline]

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        job_allocations_follow(form.instance)  # after the inline, so the job's times win

@admin.register(TeamIdentity)
class TeamIdentityAdmin(admin.ModelAdmin):
    """Which team a unix user's or Slurm account's GPU usage belongs to."""

    list_display = ["kind", "name", "team", "project"]
    list_filter = ["kind", "team"]
    search_fields = ["name"]

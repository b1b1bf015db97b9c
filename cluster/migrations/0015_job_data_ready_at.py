from django.db import migrations, models

import core.timewindow


class Migration(migrations.Migration):
    """Jobs carry an optional data-ready time (issue 19)."""

    dependencies = [
        ("cluster", "0014_guarantees"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="data_ready_at",
            field=models.DateTimeField(
                blank=True, null=True, verbose_name="data ready at", validators=[core.timewindow.validate_in_window],
                help_text="When the job's input data is (or was) ready; empty: unknown, or ready from the start.",
            ),
        ),
    ]

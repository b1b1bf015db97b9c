from django.db import migrations, models


class Migration(migrations.Migration):
    """An hour rollup carries its lowest minute and its minutes with a utilization (issue 18): nullable, no
    default, so adding them rewrites nothing; hours rolled up before stay null until recomputed."""

    dependencies = [
        ("cluster", "0015_job_data_ready_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="hourrollup",
            name="util_min_minute",
            field=models.FloatField(help_text="Lowest mean utilization of a minute with one.", null=True),
        ),
        migrations.AddField(
            model_name="hourrollup",
            name="util_minutes",
            field=models.SmallIntegerField(help_text="Minutes with a utilization.", null=True),
        ),
    ]

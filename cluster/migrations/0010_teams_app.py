"""The team and project references point at the teams app's models (same tables; issue 13)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('cluster', '0009_model_aliases_usage_alerts'),
        ('teams', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The tables stay as they are (accounting_team, …): only Django's record of the models moves.
            state_operations=[
                migrations.AlterField(
                    model_name='booking',
                    name='project',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='bookings', to='teams.project', verbose_name='project'),
                ),
                migrations.AlterField(
                    model_name='booking',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='bookings', to='teams.team', verbose_name='team'),
                ),
                migrations.AlterField(
                    model_name='gpuhold',
                    name='project',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.project', verbose_name='project'),
                ),
                migrations.AlterField(
                    model_name='gpuhold',
                    name='team',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.team', verbose_name='team'),
                ),
                migrations.AlterField(
                    model_name='job',
                    name='project',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='teams.project', verbose_name='project'),
                ),
                migrations.AlterField(
                    model_name='job',
                    name='team',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='teams.team', verbose_name='team'),
                ),
                migrations.AlterField(
                    model_name='teambookingpolicy',
                    name='team',
                    field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='booking_policy', serialize=False, to='teams.team', verbose_name='team'),
                ),
                migrations.AlterField(
                    model_name='teamidentity',
                    name='project',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='teams.project', verbose_name='project'),
                ),
                migrations.AlterField(
                    model_name='teamidentity',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='identities', to='teams.team', verbose_name='team'),
                ),
            ],
            database_operations=[],
        ),
    ]

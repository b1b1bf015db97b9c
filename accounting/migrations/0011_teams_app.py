"""Team, Project, Membership and ApiToken now belong to the teams app (same tables; issue 13)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounting', '0010_subscription_usage_failed_choices'),
        ('cluster', '0010_teams_app'),
        ('teams', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The tables stay as they are (accounting_team, …): only Django's record of the models moves.
            state_operations=[
                migrations.RemoveField(
                    model_name='membership',
                    name='team',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='user',
                ),
                migrations.RemoveField(
                    model_name='project',
                    name='team',
                ),
                migrations.AlterField(
                    model_name='ledgerentry',
                    name='project',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.project'),
                ),
                migrations.AlterField(
                    model_name='dailyenergy',
                    name='project',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.project', verbose_name='project'),
                ),
                migrations.AlterField(
                    model_name='dailyusage',
                    name='project',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.project', verbose_name='project'),
                ),
                migrations.AlterField(
                    model_name='dailyunplacedusage',
                    name='project',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.project', verbose_name='project'),
                ),
                migrations.AlterField(
                    model_name='ledgerentry',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.team'),
                ),
                migrations.AlterField(
                    model_name='quota',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='quotas', to='teams.team', verbose_name='team'),
                ),
                migrations.AlterField(
                    model_name='dailyenergy',
                    name='team',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.team', verbose_name='team'),
                ),
                migrations.AlterField(
                    model_name='dailyusage',
                    name='team',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.team', verbose_name='team'),
                ),
                migrations.AlterField(
                    model_name='dailyunplacedusage',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='teams.team', verbose_name='team'),
                ),
                migrations.DeleteModel(
                    name='ApiToken',
                ),
                migrations.DeleteModel(
                    name='Membership',
                ),
                migrations.DeleteModel(
                    name='Project',
                ),
                migrations.DeleteModel(
                    name='Team',
                ),
            ],
            database_operations=[],
        ),
    ]

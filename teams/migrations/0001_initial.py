"""Team, Project, Membership and ApiToken move from the accounting app to the teams app (issue 13).

Their tables keep their names (``db_table``); the content types are renamed so permissions and admin
log entries survive."""

import django.core.validators
import django.db.models.deletion
import django.db.models.functions.text
from django.conf import settings
from django.db import migrations, models

MODELS = ["team", "project", "membership", "apitoken"]


def _move(apps, source, target):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        # A fresh database has no content types yet (post_migrate makes them); a half-moved one may have both.
        if content_type.objects.filter(app_label=source, model=model).exists():
            content_type.objects.filter(app_label=target, model=model).delete()
            content_type.objects.filter(app_label=source, model=model).update(app_label=target)


def move_content_types(apps, schema_editor):
    _move(apps, "accounting", "teams")


def move_content_types_back(apps, schema_editor):
    _move(apps, "teams", "accounting")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('accounting', '0010_subscription_usage_failed_choices'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The tables stay as they are (accounting_team, …): only Django's record of the models moves.
            state_operations=[
                migrations.CreateModel(
                    name='Team',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100, unique=True, verbose_name='name')),
                        ('slug', models.SlugField(unique=True, verbose_name='slug')),
                        ('cost_centre', models.CharField(help_text="The code finance books this team's costs to.", max_length=32, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9][A-Za-z0-9._/-]{0,31}$', "A cost-centre code is 1 to 32 letters, digits, '.', '_', '/' or '-', starting with a letter or digit.")], verbose_name='cost-centre code')),
                        ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created')),
                    ],
                    options={
                        'verbose_name': 'team',
                        'verbose_name_plural': 'teams',
                        'db_table': 'accounting_team',
                        'ordering': ['name'],
                    },
                ),
                migrations.CreateModel(
                    name='ApiToken',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100, verbose_name='name')),
                        ('kind', models.CharField(choices=[('personal', 'Personal'), ('service', 'Service')], default='personal', max_length=16, verbose_name='kind')),
                        ('display_prefix', models.CharField(editable=False, max_length=16, verbose_name='starts with')),
                        ('key_hash', models.CharField(editable=False, max_length=64, unique=True, verbose_name='SHA-256 of the token')),
                        ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created')),
                        ('expires_at', models.DateTimeField(blank=True, null=True, verbose_name='expires')),
                        ('last_used_at', models.DateTimeField(blank=True, editable=False, null=True, verbose_name='last used')),
                        ('revoked_at', models.DateTimeField(blank=True, null=True, verbose_name='revoked')),
                        ('user', models.ForeignKey(help_text='The person the token acts as, or the service account of a service token.', on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL, verbose_name='user')),
                    ],
                    options={
                        'verbose_name': 'API token',
                        'verbose_name_plural': 'API tokens',
                        'db_table': 'accounting_apitoken',
                        'ordering': ['-created_at'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('key_hash__regex', '^[0-9a-f]{64}$')), name='apitoken_hash_is_sha256')],
                    },
                ),
                migrations.CreateModel(
                    name='Project',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100, verbose_name='name')),
                        ('slug', models.SlugField(verbose_name='slug')),
                        ('active', models.BooleanField(default=True, verbose_name='active')),
                        ('team', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='projects', to='teams.team', verbose_name='team')),
                    ],
                    options={
                        'verbose_name': 'project',
                        'verbose_name_plural': 'projects',
                        'db_table': 'accounting_project',
                        'ordering': ['team__name', 'name'],
                        'constraints': [models.UniqueConstraint(fields=('team', 'slug'), name='project_unique_slug_per_team'), models.UniqueConstraint(django.db.models.functions.text.Lower('name'), models.F('team'), name='project_unique_name_per_team')],
                    },
                ),
                migrations.CreateModel(
                    name='Membership',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('role', models.CharField(choices=[('lead', 'Lead'), ('engineer', 'Engineer')], default='engineer', max_length=16, verbose_name='role')),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL, verbose_name='user')),
                        ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='teams.team', verbose_name='team')),
                    ],
                    options={
                        'verbose_name': 'membership',
                        'verbose_name_plural': 'memberships',
                        'db_table': 'accounting_membership',
                        'ordering': ['team__name', 'role', 'user__username'],
                        'constraints': [models.UniqueConstraint(fields=('user', 'team'), name='membership_one_role_per_team'), models.CheckConstraint(condition=models.Q(('role__in', ['lead', 'engineer'])), name='membership_known_role')],
                    },
                ),
            ],
            database_operations=[
                migrations.RunPython(move_content_types, move_content_types_back),
            ],
        ),
    ]

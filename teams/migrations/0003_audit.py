"""The audit trail (issue 17). Its rows are append-only: besides the grants (teams.audit.grants), a trigger
refuses an update or delete from any role, the owner's included (TRUNCATE, which test databases reset
with, is left to the grants)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('teams', '0002_token_failures'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditEntry',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('changed_at', models.DateTimeField(verbose_name='changed at')),
                ('actor', models.CharField(help_text="The person's username, or the task or command that made the change.", max_length=150, verbose_name='who')),
                ('kind', models.CharField(choices=[('membership', 'Membership'), ('role', 'Role (admin, finance)'), ('node_token', 'Node token'), ('booking', 'Booking'), ('booking_policy', 'Team booking policy'), ('rate_card', 'Rate card'), ('energy_tariff', 'Energy tariff'), ('charge_policy', 'Charge policy'), ('quota', 'Quota'), ('period', 'Period close')], max_length=20, verbose_name='kind')),
                ('object_id', models.BigIntegerField(blank=True, null=True, verbose_name='object id')),
                ('subject', models.CharField(help_text="e.g. 'charge policy' or 'rate card 12'.", max_length=200, verbose_name='what')),
                ('before', models.JSONField(blank=True, help_text='Empty for a creation.', null=True, verbose_name='before')),
                ('after', models.JSONField(blank=True, help_text='Empty for a deletion.', null=True, verbose_name='after')),
                ('changed_by', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='changed by')),
                ('team', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='teams.team', verbose_name='team')),
            ],
            options={
                'verbose_name': 'audit entry',
                'verbose_name_plural': 'audit trail',
                'ordering': ['-changed_at', '-id'],
                'indexes': [models.Index(fields=['kind', 'changed_at'], name='teams_audit_kind_2939a2_idx'), models.Index(fields=['changed_at'], name='teams_audit_changed_2ffc76_idx')],
                'constraints': [models.CheckConstraint(condition=models.Q(('before__isnull', False), ('after__isnull', False), _connector='OR'), name='audit_before_or_after')],
            },
        ),
        migrations.RunSQL(
            [
                "CREATE OR REPLACE FUNCTION cardhour_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION '% rows are append-only: a change is recorded as a new row', TG_TABLE_NAME "
                "USING ERRCODE = 'restrict_violation'; END $$",
                "CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON teams_auditentry "
                "FOR EACH ROW EXECUTE FUNCTION cardhour_audit_append_only()",
            ],
            [
                "DROP TRIGGER IF EXISTS audit_append_only ON teams_auditentry",
                "DROP FUNCTION IF EXISTS cardhour_audit_append_only()",
            ],
        ),
    ]

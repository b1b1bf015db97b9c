"""Money changes join the one audit trail (teams.AuditEntry, issue 17): each row of the old
``accounting_moneychange`` table is copied with its time, person, subject and values, its kind and object
read from its subject ("rate card 12 (H200)", "energy tariff 3", "charge policy", "quota 5 (Team Beta)")
and a quota's team from its values; then the table goes and ``MoneyChange`` becomes the trail's money view.
Reversible: going back copies the money rows into a new ``accounting_moneychange``."""

import re

from django.db import migrations

SUBJECT = re.compile(r"^(rate card|energy tariff|quota) (\d+)")
KINDS = {"rate card": "rate_card", "energy tariff": "energy_tariff", "quota": "quota"}
MONEY_KINDS = ("rate_card", "energy_tariff", "charge_policy", "quota")


def kind_and_id(subject: str) -> tuple[str, int | None]:
    if subject.startswith("charge policy"):
        return "charge_policy", 1
    match = SUBJECT.match(subject)
    if match is None:
        return "charge_policy", None  # no other subject was ever written; kept, never dropped
    return KINDS[match.group(1)], int(match.group(2))


def forward(apps, schema_editor):
    MoneyChange = apps.get_model("accounting", "MoneyChange")
    AuditEntry = apps.get_model("teams", "AuditEntry")
    Team = apps.get_model("teams", "Team")
    teams = dict(Team.objects.values_list("slug", "pk"))
    rows = []
    for change in MoneyChange.objects.select_related("changed_by").order_by("id"):
        kind, object_id = kind_and_id(change.subject)
        values = change.after or change.before or {}
        rows.append(AuditEntry(
            changed_at=change.changed_at, changed_by_id=change.changed_by_id,
            actor=change.changed_by.username if change.changed_by else "system", kind=kind, object_id=object_id,
            team_id=teams.get(values.get("team")) if kind == "quota" else None, subject=change.subject,
            before=change.before, after=change.after,
        ))
    AuditEntry.objects.bulk_create(rows, batch_size=1000)


def backward(apps, schema_editor):
    MoneyChange = apps.get_model("accounting", "MoneyChange")
    AuditEntry = apps.get_model("teams", "AuditEntry")
    MoneyChange.objects.bulk_create(
        [MoneyChange(changed_by_id=entry.changed_by_id, subject=entry.subject[:100], before=entry.before,
                     after=entry.after)
         for entry in AuditEntry.objects.filter(kind__in=MONEY_KINDS).order_by("changed_at", "id")],
        batch_size=1000,
    )
    # changed_at is auto_now_add on the old model: set afterwards, row by row in the same order; then the
    # old table's append-only trigger (0005's), which recreating the table did not bring back.
    for change, entry in zip(MoneyChange.objects.order_by("id"),
                             AuditEntry.objects.filter(kind__in=MONEY_KINDS).order_by("changed_at", "id"), strict=True):
        MoneyChange.objects.filter(pk=change.pk).update(changed_at=entry.changed_at)
    schema_editor.execute("CREATE TRIGGER money_change_append_only BEFORE UPDATE OR DELETE ON accounting_moneychange "
                          "FOR EACH ROW EXECUTE FUNCTION cardhour_append_only()")
    schema_editor.execute("ALTER TABLE teams_auditentry DISABLE TRIGGER audit_append_only")
    AuditEntry.objects.filter(kind__in=MONEY_KINDS).delete()
    schema_editor.execute("ALTER TABLE teams_auditentry ENABLE TRIGGER audit_append_only")


class Migration(migrations.Migration):

    dependencies = [
        ('accounting', '0017_usage_refinements'),
        ('teams', '0003_audit'),
    ]

    operations = [
        migrations.RunPython(forward, backward),
        migrations.DeleteModel(
            name='MoneyChange',
        ),
        migrations.CreateModel(
            name='MoneyChange',
            fields=[
            ],
            options={
                'verbose_name': 'money change',
                'verbose_name_plural': 'money changes',
                'ordering': ['-changed_at', '-id'],
                'proxy': True,
                'indexes': [],
                'constraints': [],
            },
            bases=('teams.auditentry',),
        ),
    ]

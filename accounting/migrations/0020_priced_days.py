"""Priced days (issue 18): a cache of the daily aggregates priced at the rate cards, tariffs and charge
policy (``accounting.money.priced_days``), and the triggers that drop a day's priced rows in the same
transaction as whatever changes what they were priced from: the day's daily usage, unplaced usage or energy
(rewritten when the aggregation redoes a marked or open day), a rate card or tariff (the days of its old
and new validity), the charge policy (every day), a GPU's model (the days it has usage)."""

import django.db.models.deletion
from django.db import migrations, models

# ruff: noqa: S608 (the SQL is built from the constants below; a trigger binds no values)


PRICED, DONE = "accounting_pricedday", "accounting_priceddaydone"
AGGREGATES = ("accounting_dailyusage", "accounting_dailyunplacedusage", "accounting_dailyenergy")

FUNCTIONS = [
    f"""CREATE FUNCTION cardhour_priced_days_drop(lo date, hi date) RETURNS void LANGUAGE sql AS $$
        DELETE FROM {DONE} WHERE day >= lo AND (hi IS NULL OR day < hi);
        DELETE FROM {PRICED} WHERE day >= lo AND (hi IS NULL OR day < hi) $$""",
    f"""CREATE FUNCTION cardhour_priced_days_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        DELETE FROM {DONE} WHERE day IN (SELECT DISTINCT day FROM changed);
        DELETE FROM {PRICED} WHERE day IN (SELECT DISTINCT day FROM changed);
        RETURN NULL; END $$""",
    f"""CREATE FUNCTION cardhour_priced_days_updated() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        DELETE FROM {DONE} WHERE day IN (SELECT day FROM changed UNION SELECT day FROM before_change);
        DELETE FROM {PRICED} WHERE day IN (SELECT day FROM changed UNION SELECT day FROM before_change);
        RETURN NULL; END $$""",
    """CREATE FUNCTION cardhour_priced_days_validity() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN PERFORM cardhour_priced_days_drop(OLD.valid_from, OLD.valid_until); END IF;
        IF TG_OP IN ('UPDATE', 'INSERT') THEN PERFORM cardhour_priced_days_drop(NEW.valid_from, NEW.valid_until); END IF;
        RETURN NULL; END $$""",
    """CREATE FUNCTION cardhour_priced_days_all() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        PERFORM cardhour_priced_days_drop('-infinity'::date, NULL); RETURN NULL; END $$""",
    f"""CREATE FUNCTION cardhour_priced_days_gpu_model() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        DELETE FROM {DONE} WHERE day IN (SELECT day FROM accounting_dailyusage WHERE gpu_id = NEW.id);
        DELETE FROM {PRICED} WHERE day IN (SELECT day FROM accounting_dailyusage WHERE gpu_id = NEW.id);
        RETURN NULL; END $$""",
]
TRIGGERS = [
    *(f"CREATE TRIGGER {table}_priced_insert AFTER INSERT ON {table} REFERENCING NEW TABLE AS changed "
      "FOR EACH STATEMENT EXECUTE FUNCTION cardhour_priced_days_changed()" for table in AGGREGATES),
    *(f"CREATE TRIGGER {table}_priced_delete AFTER DELETE ON {table} REFERENCING OLD TABLE AS changed "
      "FOR EACH STATEMENT EXECUTE FUNCTION cardhour_priced_days_changed()" for table in AGGREGATES),
    *(f"CREATE TRIGGER {table}_priced_update AFTER UPDATE ON {table} REFERENCING OLD TABLE AS before_change "
      "NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION cardhour_priced_days_updated()" for table in AGGREGATES),
    *(f"CREATE TRIGGER {table}_priced_truncate AFTER TRUNCATE ON {table} "
      "FOR EACH STATEMENT EXECUTE FUNCTION cardhour_priced_days_all()" for table in AGGREGATES),
    *(f"CREATE TRIGGER {table}_priced AFTER INSERT OR UPDATE OR DELETE ON {table} "
      "FOR EACH ROW EXECUTE FUNCTION cardhour_priced_days_validity()"
      for table in ("accounting_ratecard", "accounting_energytariff")),
    "CREATE TRIGGER accounting_chargepolicy_priced AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
    "ON accounting_chargepolicy FOR EACH STATEMENT EXECUTE FUNCTION cardhour_priced_days_all()",
    "CREATE TRIGGER cluster_gpu_priced AFTER UPDATE OF model_id ON cluster_gpu FOR EACH ROW "
    "WHEN (OLD.model_id IS DISTINCT FROM NEW.model_id) EXECUTE FUNCTION cardhour_priced_days_gpu_model()",
]
DROP = [
    *(f"DROP TRIGGER IF EXISTS {table}_priced_{event} ON {table}" for table in AGGREGATES
      for event in ("insert", "delete", "update", "truncate")),
    "DROP TRIGGER IF EXISTS accounting_ratecard_priced ON accounting_ratecard",
    "DROP TRIGGER IF EXISTS accounting_energytariff_priced ON accounting_energytariff",
    "DROP TRIGGER IF EXISTS accounting_chargepolicy_priced ON accounting_chargepolicy",
    "DROP TRIGGER IF EXISTS cluster_gpu_priced ON cluster_gpu",
    *(f"DROP FUNCTION IF EXISTS {name}" for name in (
        "cardhour_priced_days_gpu_model()", "cardhour_priced_days_all()", "cardhour_priced_days_validity()",
        "cardhour_priced_days_updated()", "cardhour_priced_days_changed()", "cardhour_priced_days_drop(date, date)")),
]

class Migration(migrations.Migration):

    dependencies = [
        ('accounting', '0019_clock_skew_kind'),
        ('cluster', '0012_clock_skew_kind'),
        ('teams', '0003_audit'),
    ]

    operations = [
        migrations.CreateModel(
            name='PricedDayDone',
            fields=[
                ('day', models.DateField(primary_key=True, serialize=False, verbose_name='day')),
                ('priced_at', models.DateTimeField(help_text="The application's clock when it was priced.", verbose_name='priced at')),
            ],
            options={
                'verbose_name': 'priced day done',
                'verbose_name_plural': 'priced days done',
            },
        ),
        migrations.CreateModel(
            name='PricedDay',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('day', models.DateField(verbose_name='day')),
                ('kind', models.CharField(choices=[('busy', 'Busy'), ('idle', 'Idle'), ('unmeasured', 'Unmeasured'), ('overflow', 'Overflow'), ('energy', 'Energy'), ('unallocated', 'Share of unallocated capacity')], max_length=16, verbose_name='kind')),
                ('price', models.DecimalField(blank=True, decimal_places=4, help_text="The rate card's price per card-hour (energy: the tariff's per kWh); empty: usage with no price.", max_digits=14, null=True, verbose_name='price')),
                ('rate', models.DecimalField(blank=True, decimal_places=12, help_text="The price after the charge policy's factor, as a close books it.", max_digits=24, null=True, verbose_name='rate')),
                ('rate_valid_from', models.DateField(blank=True, null=True, verbose_name='rate valid from')),
                ('ticks', models.BigIntegerField(help_text='Card-hour ticks; energy: millijoules.', verbose_name='ticks')),
                ('amount', models.DecimalField(blank=True, decimal_places=4, help_text="The day's ticks × rate, rounded once.", max_digits=18, null=True, verbose_name='amount')),
                ('gpu_model', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='cluster.gpumodel')),
                ('project', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='teams.project')),
                ('team', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='teams.team')),
            ],
            options={
                'verbose_name': 'priced day',
                'verbose_name_plural': 'priced days',
                'constraints': [models.UniqueConstraint(fields=('day', 'team', 'project', 'gpu_model', 'kind'), name='priced_day_one_row', nulls_distinct=False), models.CheckConstraint(condition=models.Q(('kind__in', ['busy', 'idle', 'unmeasured', 'energy'])), name='priced_day_kind'), models.CheckConstraint(condition=models.Q(models.Q(('amount__isnull', True), ('price__isnull', True), ('rate__isnull', True), ('rate_valid_from__isnull', True)), models.Q(('amount__isnull', False), ('price__isnull', False), ('rate__isnull', False), ('rate_valid_from__isnull', False)), _connector='OR'), name='priced_day_priced_or_not')],
            },
        ),
        migrations.RunSQL(FUNCTIONS + TRIGGERS, DROP),
    ]

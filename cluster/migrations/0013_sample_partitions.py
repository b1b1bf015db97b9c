"""Raw samples partitioned by UTC day (issue 18): PostgreSQL declarative partitioning, RANGE on ``ts``.

The table keeps its name, columns, checks, key and foreign key; it becomes the partitioned parent of one
table per UTC day (``cluster_sample_pYYYYMMDD``) and a DEFAULT partition that catches a record whose day
has no partition yet (never lost; ``cluster.telemetry.partitions`` moves such rows into their day's
partition when it makes it). The existing rows are copied into their days' partitions.

The parent is owned by the migrating role, and PostgreSQL lets only a table's owner attach or create its
partitions or drop them. So the three things the application does with partitions are functions run as
the owner (``SECURITY DEFINER``, with a fixed ``search_path``), each doing one narrow thing with a date:
the application's role (``cardhour_app``) is granted EXECUTE on them (``teams.audit.grants``) and nothing
more, so it can create days ahead and drop expired days but cannot alter, drop or replace the table.

The index on ``ts`` alone is dropped (the hot table keeps only its key): retention no longer deletes rows
by time, and every read of samples names the GPU (the key's range scan) or reads whole days, which the
partitions themselves now bound. ``docs/decisions.md``, "Raw samples by day (issue 18)".
"""

# ruff: noqa: S608 (the SQL names the tables of this migration, constants; no input reaches it)

from django.db import migrations

SAMPLE, DEFAULT, GPU = "cluster_sample", "cluster_sample_default", "cluster_gpu"
FK = "cluster_sample_gpu_id_d386fc33_fk_cluster_gpu_id"  # Django's own name for it (0002)
AHEAD_DAYS = 3  # today and the next ones; the periodic task keeps TELEMETRY_PARTITIONS_AHEAD_DAYS from then on
FUNCTIONS = ("cardhour_sample_partition_add(date)", "cardhour_sample_default_days()",
             "cardhour_sample_prune(timestamptz)")

CREATE_FUNCTIONS = [
    # One day's partition, [day 00:00 UTC, next day 00:00 UTC); false when it exists. Rows of that day that
    # the DEFAULT partition caught move into it, under a lock that keeps new ones out until it is attached
    # (ATTACH would otherwise find them there and fail). The CHECK lets ATTACH skip scanning the new table.
    f"""
    CREATE FUNCTION cardhour_sample_partition_add(day date) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '10s' AS $fn$
    DECLARE
        part text := '{SAMPLE}_p' || to_char(day, 'YYYYMMDD');
        lo timestamptz := day::timestamp AT TIME ZONE 'UTC';
        hi timestamptz := (day + 1)::timestamp AT TIME ZONE 'UTC';
    BEGIN
        IF day IS NULL OR day NOT BETWEEN DATE '2000-01-01' AND DATE '2100-12-31' THEN
            RAISE EXCEPTION 'no sample partition for day %', day USING ERRCODE = '22023';
        END IF;
        PERFORM pg_advisory_xact_lock(hashtext('cardhour_sample_partitions'));  -- one maker at a time
        IF to_regclass(part) IS NOT NULL THEN
            RETURN false;
        END IF;
        EXECUTE format('CREATE TABLE %I (LIKE {SAMPLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
        LOCK TABLE {DEFAULT} IN ACCESS EXCLUSIVE MODE;
        EXECUTE format('WITH moved AS (DELETE FROM {DEFAULT} WHERE ts >= $1 AND ts < $2 RETURNING *) '
                       'INSERT INTO %I SELECT * FROM moved', part) USING lo, hi;
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (ts >= %L AND ts < %L)', part, part || '_day', lo, hi);
        EXECUTE format('ALTER TABLE {SAMPLE} ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_day');
        RETURN true;
    END
    $fn$
    """,
    # The UTC days of the rows the DEFAULT partition holds (normally none).
    f"""
    CREATE FUNCTION cardhour_sample_default_days() RETURNS SETOF date
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
        SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date FROM {DEFAULT} ORDER BY 1
    $fn$
    """,
    # Retention: drop every day partition that ends at or before ``before`` (oldest first), and delete the
    # DEFAULT partition's rows older than it. Returns the partitions dropped and the rows deleted.
    f"""
    CREATE FUNCTION cardhour_sample_prune(before timestamptz, OUT dropped text[], OUT deleted bigint)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '10s' AS $fn$
    DECLARE
        part record;
    BEGIN
        dropped := '{{}}';
        FOR part IN
            SELECT c.relname,
                   (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz AS upper
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = '{SAMPLE}'::regclass AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
            ORDER BY 2
        LOOP
            EXIT WHEN part.upper IS NULL OR part.upper > before;
            EXECUTE format('DROP TABLE %I', part.relname);
            dropped := dropped || part.relname::text;
        END LOOP;
        DELETE FROM {DEFAULT} WHERE ts < before;
        GET DIAGNOSTICS deleted = ROW_COUNT;
    END
    $fn$
    """,
    *[f"REVOKE ALL ON FUNCTION {function} FROM PUBLIC" for function in FUNCTIONS],
]

FORWARD = [
    f"ALTER TABLE {SAMPLE} RENAME TO {SAMPLE}_unpartitioned",
    f"ALTER INDEX {SAMPLE}_pkey RENAME TO {SAMPLE}_unpartitioned_pkey",
    "DROP INDEX sample_ts",
    f"CREATE TABLE {SAMPLE} (LIKE {SAMPLE}_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (ts)",
    f"ALTER TABLE {SAMPLE} ADD CONSTRAINT {SAMPLE}_pkey PRIMARY KEY (gpu_id, ts)",
    f"ALTER TABLE {SAMPLE} ADD CONSTRAINT {FK} FOREIGN KEY (gpu_id) REFERENCES {GPU} (id) DEFERRABLE INITIALLY DEFERRED",
    f"CREATE TABLE {DEFAULT} PARTITION OF {SAMPLE} DEFAULT",
    *CREATE_FUNCTIONS,
    # A partition for every day the old table holds and for today and the days ahead, then the rows.
    f"""
    SELECT cardhour_sample_partition_add(day) FROM (
        SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date FROM {SAMPLE}_unpartitioned
        UNION SELECT (now() AT TIME ZONE 'UTC')::date + ahead FROM generate_series(0, {AHEAD_DAYS}) AS ahead
    ) AS days (day) ORDER BY day
    """,
    f"INSERT INTO {SAMPLE} SELECT * FROM {SAMPLE}_unpartitioned",
    f"DROP TABLE {SAMPLE}_unpartitioned",
]

BACKWARD = [
    *[f"DROP FUNCTION {function}" for function in FUNCTIONS],
    f"ALTER TABLE {SAMPLE} RENAME TO {SAMPLE}_partitioned",
    f"ALTER INDEX {SAMPLE}_pkey RENAME TO {SAMPLE}_partitioned_pkey",
    f"CREATE TABLE {SAMPLE} (LIKE {SAMPLE}_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
    f"ALTER TABLE {SAMPLE} ADD CONSTRAINT {SAMPLE}_pkey PRIMARY KEY (gpu_id, ts)",
    f"INSERT INTO {SAMPLE} SELECT * FROM {SAMPLE}_partitioned",
    f"DROP TABLE {SAMPLE}_partitioned",
    f"ALTER TABLE {SAMPLE} ADD CONSTRAINT {FK} FOREIGN KEY (gpu_id) REFERENCES {GPU} (id) DEFERRABLE INITIALLY DEFERRED",
    f"CREATE INDEX sample_ts ON {SAMPLE} (ts)",
]


class Migration(migrations.Migration):

    dependencies = [
        ("cluster", "0012_clock_skew_kind"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
            state_operations=[migrations.RemoveIndex(model_name="sample", name="sample_ts")],
        ),
    ]

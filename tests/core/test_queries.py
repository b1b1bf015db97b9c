"""Query helpers: ids as one array parameter, and rows packed by PostgreSQL and unpacked by numpy."""

from datetime import UTC, datetime

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster.models import GpuModel
from core.queries import id_array, numpy_rows

pytestmark = pytest.mark.django_db


def test_id_array_is_one_parameter_whatever_the_number_of_ids():
    models = [GpuModel.objects.create(name=f"M{n}", short_name=f"M{n}", memory_mib=1) for n in range(3)]
    ids = [m.pk for m in models[:2]] + list(range(10**6, 10**6 + 5000))
    with CaptureQueriesContext(connection) as queries:
        found = set(GpuModel.objects.filter(pk__in=id_array(ids)).values_list("pk", flat=True))
    assert found == {m.pk for m in models[:2]}
    assert "unnest" in queries[0]["sql"] and len(queries[0]["sql"]) < 60_000  # not 5,002 placeholders


def test_numpy_rows_reads_bigints_and_doubles_with_bound_values():
    sql = """SELECT n::bigint, (n * 1.5)::float8, date_part('epoch', %(at)s::timestamptz + n * interval '1 hour')::bigint
             FROM generate_series(1, %(count)s) n WHERE %(name)s = 'o''brien'"""
    params = {"count": 40_000, "at": datetime(2026, 11, 2, tzinfo=UTC), "name": "o'brien"}
    with CaptureQueriesContext(connection) as queries, connection.cursor() as cursor:
        rows = numpy_rows(cursor, sql, params, "ifi")
    assert rows.shape == (40_000, 3) and rows.dtype == np.float64
    assert rows[0].tolist() == [1, 1.5, datetime(2026, 11, 2, 1, tzinfo=UTC).timestamp()]
    assert rows[-1, 0] == 40_000 and rows[:, 1].sum() == 1.5 * 40_000 * 40_001 / 2
    assert len(queries) == 1 and "string_agg" in queries[0]["sql"]  # counted like any query
    with connection.cursor() as cursor:
        empty = numpy_rows(cursor, "SELECT 1::bigint WHERE FALSE", {}, "i")
        assert empty.shape == (0, 1) and empty.dtype == np.int64


def test_numpy_rows_refuses_a_null():
    with connection.cursor() as cursor:
        with pytest.raises(ValueError, match="null"):
            numpy_rows(cursor, "SELECT NULL::bigint", {}, "i")
        with pytest.raises(ValueError, match="null"):  # a null among many rows
            numpy_rows(cursor, "SELECT CASE WHEN n = 7 THEN NULL ELSE n END::bigint, 1::bigint "
                                 "FROM generate_series(1, 9) n", {}, "ii")

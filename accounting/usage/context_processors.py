"""The boards' notice while older history is still loading (read only by the pages that show it)."""

from django.utils.functional import SimpleLazyObject

from accounting.usage.selectors import backfill_in_progress


def backfill(request):
    """``backfill``: :class:`accounting.usage.selectors.Backfill` or None, read when a template asks."""
    return {"backfill": SimpleLazyObject(backfill_in_progress)}

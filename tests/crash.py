"""A worker killed in the middle of a task (issue 17), as the database sees it: the transaction open at that
moment never commits. :func:`crash_after_call` lets a real function of the task run, then raises
:class:`WorkerKilled` (a ``BaseException``, so no ``except Exception`` of the task can take it for a failure
it handles) from inside the task's transaction; :func:`rows` reads a table as a run leaves it, without the
ids that a second run draws afresh from the sequences."""

from __future__ import annotations

from django.db import models


class WorkerKilled(BaseException):
    """The worker process is gone (kill -9, the hard time limit): nothing after this point runs."""


def crash_after_call(monkeypatch, owner, name: str, *, call: int = 1) -> list:
    """Replace ``owner.name`` by a function that calls the real one and, on its ``call``-th call, raises
    :class:`WorkerKilled` once the real call returned (its writes made, uncommitted). Returns the list of
    calls, so a test can check the crash happened where it meant."""
    real = getattr(owner, name)
    calls: list = []

    def crashing(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append(kwargs or args)
        if len(calls) == call:
            raise WorkerKilled(f"killed after call {call} of {name}")
        return result

    monkeypatch.setattr(owner, name, crashing)
    return calls


def rows(model: type[models.Model], *, exclude: tuple[str, ...] = ()) -> list[tuple]:
    """Every row of ``model``, its fields in order without the auto ids and ``exclude``, sorted."""
    names = [field.attname for field in model._meta.concrete_fields
             if not isinstance(field, models.AutoField) and field.attname not in exclude]
    return sorted(model.objects.values_list(*names), key=repr)

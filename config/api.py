"""API plumbing shared by every app: the error shape and the permission classes."""

from rest_framework import permissions
from rest_framework.views import exception_handler as drf_exception_handler

from accounting.roles import is_admin


def exception_handler(exc, context):
    """DRF's handler, with every error body carrying ``detail`` so clients have one place to look.

    Validation errors keep DRF's per-field lists (``{"hostname": ["…"]}``) and gain a ``detail`` line
    that names each field and its rule.
    """
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and "detail" not in data:
        parts = []
        for field, messages in data.items():
            text = " ".join(str(m) for m in messages) if isinstance(messages, list) else str(messages)
            parts.append(f"{field}: {text}")
        response.data = {"detail": "; ".join(parts), **data}
    elif isinstance(data, list):
        response.data = {"detail": " ".join(str(m) for m in data), "errors": data}
    return response


class ReadAllWriteAdmin(permissions.BasePermission):
    """Any signed-in role reads; only admins write (inventory)."""

    def has_permission(self, request, view):
        if not request.user.is_authenticated:
            return False
        return request.method in permissions.SAFE_METHODS or is_admin(request.user)


def form_errors(form) -> dict[str, list[str]]:
    """A Django form's errors in DRF's shape, for query-parameter forms shared with HTML pages."""
    return {field: [error["message"] for error in errors] for field, errors in form.errors.get_json_data().items()}

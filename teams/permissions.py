"""DRF permission classes that know the roles (teams.roles)."""

from rest_framework import permissions

from teams.roles import is_admin


class ReadAllWriteAdmin(permissions.BasePermission):
    """Any signed-in role reads; only admins write (inventory)."""

    def has_permission(self, request, view):
        if not request.user.is_authenticated:
            return False
        return request.method in permissions.SAFE_METHODS or is_admin(request.user)

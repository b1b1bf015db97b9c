"""Every model's admin pages open for an admin (a broken admin is found here, not by a person)."""

import pytest
from django.contrib import admin
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_every_registered_admin_changelist_and_add_page_opens(client, admin_user, small_cluster):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client.force_login(admin_user)
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        changelist = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        assert client.get(changelist).status_code == 200, changelist
        if model_admin.has_add_permission(type("R", (), {"user": admin_user})()):
            add = reverse(f"admin:{meta.app_label}_{meta.model_name}_add")
            assert client.get(add).status_code == 200, add

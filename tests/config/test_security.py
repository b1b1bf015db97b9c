"""Security headers and production settings (issue 17): a Content-Security-Policy without inline
scripts on every page, a Permissions-Policy, ``no-store`` on the API, and ``check --deploy`` clean under
the production settings (HTTPS behind a proxy that ends TLS)."""

import os
import re
import subprocess
import sys

import pytest

from config.embedded import BASE_DIR
from tests.config.test_settings import GOOD_ENV


def test_check_deploy_finds_nothing_under_the_production_settings():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "CARDHOUR"))}
    env.update(GOOD_ENV, DEBUG="false", HTTPS="true", ALLOWED_HOSTS="cardhour.example.org",
               SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto", SECRET_KEY="k" * 20 + "Zq9$v" * 8)
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=BASE_DIR,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
    code = ("import config.settings as s; print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE,"
            " s.CSRF_COOKIE_SECURE, s.SECURE_PROXY_SSL_HEADER)")
    shown = subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, env=env, capture_output=True, text=True)
    assert shown.stdout.split("\n")[0] == "True 31536000 True True ('HTTP_X_FORWARDED_PROTO', 'https')", shown.stderr
    plain = {**env, "HTTPS": "false"}
    plain.pop("SECURE_PROXY_SSL_HEADER")
    shown = subprocess.run([sys.executable, "-c", code.replace(", s.SECURE_PROXY_SSL_HEADER", "")], cwd=BASE_DIR,
                           env=plain, capture_output=True, text=True)
    assert shown.stdout.split("\n")[0] == "False 0 False False", shown.stderr  # the demo's loopback HTTP


@pytest.mark.django_db
def test_pages_carry_a_policy_that_runs_no_inline_script(client, admin_user, small_cluster):
    pages = [("/accounts/login/", None), ("/", admin_user), ("/inventory/", admin_user)]
    for path, user in pages:
        if user is not None:
            client.force_login(user)
        response = client.get(path)
        assert response.status_code == 200, path
        policy = response["Content-Security-Policy"]
        directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
        assert directives["script-src"] == "'self'" and directives["frame-ancestors"] == "'none'"
        assert "unsafe-inline" not in directives["script-src"] and "unsafe-eval" not in policy
        html = response.content.decode()
        for tag in re.findall(r"<script\b[^>]*>", html):  # what a policy of 'self' would block
            assert "src=" in tag or 'type="application/json"' in tag, (path, tag)
        assert not re.search(r"\son[a-z]+=", html), path  # no inline event handler
        assert "camera=()" in response["Permissions-Policy"]


@pytest.mark.django_db
def test_api_answers_are_not_stored_and_carry_the_permissions_policy(api, admin_user, small_cluster):
    api.as_user(admin_user)
    for path in ("/api/v1/nodes/", "/api/v1/no-such/"):
        response = api.get(path)
        assert response["Cache-Control"] == "no-store", path
        assert "geolocation=()" in response["Permissions-Policy"]

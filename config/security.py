"""Security headers on every answer (issue 17). Django 5.2 has none for these; a small middleware is
all they need (django-csp's policy objects are more than one fixed policy wants).

- **Content-Security-Policy** on HTML: scripts from our own static files only (no inline script, no
  eval; the figures travel in ``<script type="application/json">`` data blocks, which CSP does not run);
  styles also inline (plotly.js writes its own ``<style>``); images also ``data:``/``blob:`` (plotly's
  PNG and SVG downloads); nothing from another origin, no framing, forms to ourselves only.
- **Permissions-Policy** on every answer: no camera, microphone, geolocation, payment, USB or sensors.
- **Cache-Control: no-store** on the API's answers: they hold team data, which no shared cache or
  browser history should keep.
"""

from __future__ import annotations

from config.errors import is_api

CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'", "script-src 'self'", "style-src 'self' 'unsafe-inline'", "img-src 'self' data: blob:",
    "font-src 'self' data:", "connect-src 'self'", "object-src 'none'", "base-uri 'self'", "form-action 'self'",
    "frame-ancestors 'none'",
])
PERMISSIONS_POLICY = ", ".join(f"{feature}=()" for feature in (
    "accelerometer", "camera", "geolocation", "gyroscope", "magnetometer", "microphone", "payment", "usb"))


class SecurityHeaders:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.get("Content-Type", "").startswith("text/html"):
            response.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        if is_api(request):
            response["Cache-Control"] = "no-store"
        return response



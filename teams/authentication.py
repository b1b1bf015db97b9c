from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from teams.models import ApiToken


class HashedTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <token>`` (or ``Token <token>``) checked against stored SHA-256 hashes."""

    keywords = (b"bearer", b"token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Authorization header must be 'Bearer <token>'."))
        try:
            raw = header[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(_("The token contains invalid characters.")) from None
        token = ApiToken.authenticate(raw)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked token."))
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class HashedTokenScheme(OpenApiAuthenticationExtension):
    target_class = HashedTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API token from /account/tokens/."}

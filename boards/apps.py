from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BoardsConfig(AppConfig):
    name = "boards"
    verbose_name = _("Boards")

"""Texts written once in every language the site speaks, for what is composed before anyone reads it (an
alert raised by a worker, whose message a reader sees later in their own language)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from django.conf import settings
from django.utils import translation


def in_every_language(build: Callable[[], str]) -> dict[str, str]:
    """``build()`` (a text made with gettext, number and date formats) once per language of
    ``settings.LANGUAGES``, keyed by language code."""
    texts = {}
    for code, _name in settings.LANGUAGES:
        with translation.override(code):
            texts[code] = str(build())
    return texts


def in_current_language(texts: Mapping[str, str] | None, fallback: str) -> str:
    """The text of the active language from :func:`in_every_language`'s ``texts``, else ``fallback``."""
    if not texts:
        return fallback
    return texts.get(translation.get_language() or settings.LANGUAGE_CODE) or fallback

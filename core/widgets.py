"""Form widgets that render without the template engine. Django renders each ``<option>`` of a ``Select``
through a template include: a board's filters (125 nodes, 20 teams, the models and pools) took about 80 ms
of its page at 1,000 GPUs. :class:`QuickSelect` writes the same HTML directly (same attributes, same escaping)."""

from __future__ import annotations

from django import forms
from django.forms.utils import flatatt
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe


class QuickSelect(forms.Select):
    """A ``<select>`` with the HTML of Django's ``Select`` (``django/forms/widgets/select.html``), option
    groups included, written by Python string joins instead of a template per option."""

    def render(self, name, value, attrs=None, renderer=None) -> SafeString:
        widget = self.get_context(name, value, attrs)["widget"]
        parts = [format_html('<select name="{}"{}>', widget["name"], flatatt(widget["attrs"]))]
        for group_name, options, _index in widget["optgroups"]:
            if group_name:
                parts.append(format_html('<optgroup label="{}">', group_name))
            parts.append(format_html_join("\n", '<option value="{}"{}>{}</option>',
                                          ((str(o["value"]), flatatt(o["attrs"]), o["label"]) for o in options)))
            if group_name:
                parts.append(mark_safe("</optgroup>"))
        parts.append(mark_safe("</select>"))
        return mark_safe("\n".join(parts))  # noqa: S308 (each part escaped by format_html)

"""QuickSelect writes the HTML of Django's Select without a template per option (core/widgets.py)."""

from html.parser import HTMLParser

from django import forms

from core.widgets import QuickSelect

CHOICES = [("", "All nodes"), ("gpu-a", "gpu-a"), ("x\"<&>", "Team <A> & \"B\""),
           ("Pools", [("train", "train"), ("infer", "infer")])]


class Parsed(HTMLParser):
    """The tags, their attributes (in any order: HTML gives the order no meaning) and the text between."""

    def __init__(self, html: str):
        super().__init__()
        self.items: list[tuple] = []
        self.feed(str(html))

    def handle_starttag(self, tag, attrs):
        self.items.append(("start", tag, sorted(attrs)))

    def handle_endtag(self, tag):
        self.items.append(("end", tag))

    def handle_data(self, data):
        if data.strip():
            self.items.append(("text", data))


def tight(html: str) -> list[tuple]:
    return Parsed(html).items


def test_it_renders_what_djangos_select_renders():
    for value in ("", "gpu-a", "x\"<&>", "infer", None):
        ours = QuickSelect(choices=CHOICES, attrs={"class": "narrow", "required": True, "disabled": False})
        django = forms.Select(choices=CHOICES, attrs={"class": "narrow", "required": True, "disabled": False})
        assert tight(ours.render("node", value, attrs={"id": "id_node"})) == tight(
            django.render("node", value, attrs={"id": "id_node"})), value


def test_it_escapes_labels_and_values_and_marks_the_selected_option():
    html = QuickSelect(choices=CHOICES).render("node", "x\"<&>")
    assert '<option value="x&quot;&lt;&amp;&gt;" selected>Team &lt;A&gt; &amp; &quot;B&quot;</option>' in html
    assert html.count(" selected") == 1 and '<optgroup label="Pools">' in html

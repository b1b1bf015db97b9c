"""plotly's Simplified Chinese locale (issue 14): served locally by the static finders (no CDN), loaded right
after the plotly bundle on every page that draws charts, and chosen by js/charts.js on Chinese pages."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.contrib.staticfiles.views import serve
from django.test import RequestFactory
from django.urls import reverse

LOCALE_JS = "js/plotly-locale-zh-cn.js"
PLOTLY_TAG = "<script src=\"{% static 'vendor/plotly/plotly.min.js' %}\" defer></script>"
LOCALE_TAG = f"<script src=\"{{% static '{LOCALE_JS}' %}}\" defer></script>"
TEMPLATES_DIR = Path(settings.BASE_DIR) / "templates"
MONTHS = ["一月", "二月", "三月", "四月", "五月", "六月", "七月", "八月", "九月", "十月", "十一月", "十二月"]


def test_the_finders_find_and_serve_the_zh_cn_locale():
    path = finders.find(LOCALE_JS)
    assert path, f"{LOCALE_JS} is not found by the static finders"
    source = Path(path).read_text(encoding="utf-8")
    assert 'name: "zh-CN"' in source and 'moduleType: "locale"' in source
    assert "Plotly.register(locale)" in source
    assert "window.PlotlyLocales" in source  # safe when Plotly is not defined yet
    months = re.search(r"\bmonths: \[([^\]]*)\]", source).group(1)
    assert re.findall(r'"([^"]*)"', months) == MONTHS
    assert "https://" not in source.replace("github.com/plotly/plotly.js", "")  # nothing fetched at runtime

    response = serve(RequestFactory().get(settings.STATIC_URL + LOCALE_JS), LOCALE_JS, insecure=True)
    assert response.status_code == 200
    assert "十二月".encode() in b"".join(response.streaming_content)


def test_every_template_that_loads_plotly_loads_the_locale_right_after():
    loading = [p for p in TEMPLATES_DIR.rglob("*.html") if "vendor/plotly/plotly.min.js" in p.read_text()]
    assert loading, "no template loads plotly"
    for template in loading:
        lines = [line.strip() for line in template.read_text().splitlines()]
        at = lines.index(PLOTLY_TAG)
        assert lines[at + 1] == LOCALE_TAG, template.relative_to(TEMPLATES_DIR)


def test_charts_js_asks_for_zh_cn_on_chinese_pages():
    source = Path(finders.find("js/charts.js")).read_text()
    assert "document.documentElement.lang" in source and '"zh-CN"' in source


@pytest.mark.django_db
def test_the_node_page_in_chinese_loads_the_locale_after_plotly(client, engineer_a, small_cluster):
    client.force_login(engineer_a)
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/inventory/"})
    response = client.get(reverse("cluster:node-detail", args=["h200-a"]))
    assert response.status_code == 200
    html = response.content.decode()
    assert '<html lang="zh-hans">' in html
    plotly = html.index(settings.STATIC_URL + "vendor/plotly/plotly.min.js")
    locale = html.index(settings.STATIC_URL + LOCALE_JS)
    charts = html.index(settings.STATIC_URL + "js/charts.js")
    assert plotly < locale < charts

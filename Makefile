# felab: the front door. `make` alone lists the targets; each `## ` comment is its help line.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# An extra installs on first use of the target that needs it: .venv/.installed-<extra> (see pyproject.toml).
EXTRA = $(VENV)/.installed-$(1)
# The folder the learner typed `make` in (make -C and 03-labs/ run this file from the kit folder):
# the kit writes the commands it prints for that folder (felab/paths.py, from_here).
export FELAB_CALLER_DIR ?= $(PWD)
# A variable typed on make's command line that a target does not read would be dropped without a
# word (`make replay REPLICAS=8` replayed one replica). A target whose flags go in ARGS hands felab
# what it reads and the names of the others, which felab refuses (felab/make_vars.py); make puts
# their values in the environment. (FELAB_*, PYTHON, and PY, VENV and STAMP, which tests set, are
# read by every target.)
TYPED = $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v)))
UNREAD = $(filter-out $(1) FELAB_% PYTHON PY VENV STAMP,$(TYPED))

.DEFAULT_GOAL := help
.PHONY: help setup demo mock check smoke bench test lint numbers new-lesson fw-check bundle bundle-serve \
	engines llama-server tiny-model test-engines replay test-load cluster calibrate docs \
	fleet fleet-stop fleet-stats fleet-check test-routers

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The learner's settings, started from .env.example when the kit is installed: 03-labs/.env is a
# link to this file, and a link to nothing would make `cp .env.example .env` there refuse to write.
.env:
	@cp .env.example $@

$(STAMP): pyproject.toml
	@test -e .env || cp .env.example .env
	@$(PYTHON) -c 'import sys; (3, 10) <= sys.version_info[:2] <= (3, 13) or sys.exit("error: felab needs Python 3.10 to 3.13; $(PYTHON) is " + sys.version.split()[0] + ". Name another one, for example: make PYTHON=python3.12 setup")'
	@echo "installing the kit into $(VENV) (once; about 35 s on a fast network, longer on a slow one) ..."
	@start=$$(date +%s); $(PYTHON) -m venv $(VENV) && $(PY) -m pip install --quiet -e . \
	  && echo "installed in $$(( $$(date +%s) - start )) s"
	@touch $@

$(VENV)/.installed-%: $(STAMP)
	@echo "installing the kit's $* extra into $(VENV) (once) ..."
	@start=$$(date +%s); $(PY) -m pip install --quiet -e '.[$*]' && echo "installed in $$(( $$(date +%s) - start )) s"
	@touch $@

setup: $(STAMP) | .env ## create .venv and install the kit, and .env from .env.example (the other targets do this for you)

demo: $(STAMP) ## lesson 06 on the practice server: opening first and time first, one table
	@$(PY) -m felab demo

mock: export FELAB_MAKE_TARGET = mock
mock: export FELAB_MAKE_READS := PORT PROFILE
mock: export FELAB_MAKE_UNREAD = $(call UNREAD,PORT PROFILE)
mock: $(STAMP) ## the practice server in the foreground on port 8765, or make mock PORT=9000; PROFILE=f: a calibrated twin (Ctrl+C stops it)
	@$(if $(strip $(call UNREAD,PORT PROFILE)),$(PY) -m felab.make_vars &&) $(PY) -m felab.mock_server $(if $(PORT),--port "$(PORT)") $(if $(PROFILE),--profile "$(PROFILE)")

check: $(STAMP) ## which servers are up, each target's URL and model, whether FIREWORKS_API_KEY is set
	@$(PY) -m felab check

smoke: $(STAMP) ## every lesson script against a fresh practice server, in quick mode
	@$(PY) -m felab smoke

bench: $(STAMP) ## how faithful the practice server is: TTFT vs predicted and vs the floor, CPU, memory; replay speed, balance, --jobs, hostile input; calibrate and check against llama.cpp where built; the twin on held-out work in every engine case built (~4 min, ~25 with the engines)
	@$(PY) -m felab.bench

fw-check: $(call EXTRA,fireworks) ## anything on Fireworks still billing, and the command that stops it (fails closed)
	@$(PY) -m felab fw-check

# Targets whose messages differ when typed through make (felab/paths.py, make_target): flags go in
# ARGS; bundle-serve builds first, and the build then says the pages are served next, not how to.
replay: export FELAB_MAKE_TARGET = replay
replay: export FELAB_MAKE_READS := TRACE PROFILE ARGS
replay: export FELAB_MAKE_UNREAD = $(call UNREAD,TRACE PROFILE ARGS)
calibrate: export FELAB_MAKE_READS := TARGET ARGS
calibrate: export FELAB_MAKE_UNREAD = $(call UNREAD,TARGET ARGS)
bundle-serve: export FELAB_MAKE_TARGET = bundle-serve

replay: $(call EXTRA,plot) $(if $(findstring --scheduler,$(ARGS)),$(call EXTRA,cluster)) ## a production trace through the practice server's model: make replay TRACE=f PROFILE=f ARGS="--replicas 1,8"
	@$(PY) -m felab replay $(TRACE) $(if $(PROFILE),--profile "$(PROFILE)") $(ARGS)

cluster: $(call EXTRA,cluster) ## install Dask for sweeps on several machines: replay --scheduler (docs/replay.md)
	@echo "Dask is installed. Start a scheduler ($(VENV)/bin/dask scheduler), a worker on each machine"
	@echo "($(VENV)/bin/dask worker tcp://HOST:8786, from the kit's folder), then:"
	@echo "  make replay ARGS=\"--replicas 8,18,64 --route random,prefix --scheduler tcp://HOST:8786\""

calibrate: $(call EXTRA,plot) ## measure a server, write a profile for the practice server: make calibrate TARGET=llamacpp ARGS="--check f"
	@$(PY) -m felab calibrate --target $(or $(TARGET),llamacpp) $(ARGS)

# The routers extra is one binary per router from PyPI: say what to do when it cannot be had.
$(VENV)/.installed-routers: $(STAMP)
	@echo "installing the kit's routers extra into $(VENV) (once) ..."
	@$(PY) -m pip install --quiet -e '.[routers]' || { echo "error: could not install the routers extra (sglang-router, vllm-router) from PyPI; pip's reason is above. Without network here: on a machine with network run 'pip download sglang-router vllm-router -d wheels', copy wheels/ into the kit folder, then '$(PY) -m pip install wheels/*.whl' and 'touch $@'. Or 'make fleet ROUTER=none', the kit's own fleet, which needs nothing more." >&2; exit 1; }
	@touch $@

fleet: export FELAB_MAKE_READS := N ROUTER POLICY PORT PROFILE
fleet: export FELAB_MAKE_UNREAD = $(call UNREAD,N ROUTER POLICY PORT PROFILE)
fleet: $(if $(filter none,$(ROUTER)),$(STAMP),$(call EXTRA,routers)) ## practice servers behind a real router: make fleet N=4 ROUTER=sglang|vllm|none [POLICY=cache_aware PROFILE=f PORT=8780] (Ctrl+C stops all)
	@$(PY) -m felab fleet -n "$(or $(N),4)" --router "$(or $(ROUTER),sglang)" $(if $(POLICY),--policy "$(POLICY)") $(if $(PORT),--port "$(PORT)") $(if $(PROFILE),--profile "$(PROFILE)")

fleet-stop: $(STAMP) ## stop the running fleet: only the processes it started, by PID
	@$(PY) -m felab fleet stop

fleet-stats: $(STAMP) ## where the fleet's router sent the requests: per worker, requests, prefix-cache hit rate, load
	@$(PY) -m felab fleet stats

fleet-check: $(call EXTRA,routers) ## the kit's modelled route against sglang-router on one workload: which worker, hit rate, load (~2 min; ARGS="--json")
	@$(PY) -m felab fleet check --router "$(or $(ROUTER),sglang)" $(ARGS)

test-routers: $(call EXTRA,dev) ## the real routers (sglang-router, vllm-router) in front of practice servers (installs them, or skips saying why)
	$(PY) -m pytest -m routers tests/test_fleet_routers.py

numbers: $(call EXTRA,plot) ## your numbers: the latest cold run per lesson, target and order (and a TTFT picture)
	@$(PY) -m felab numbers

# N and NAME reach Python as arguments, through the environment and exactly as typed ($(value):
# make expands nothing in them), never as shell text: a NAME holding quotes, `...` or $(...) is
# refused by felab's check, not run.
new-lesson: export FELAB_NEW_N := $(value N)
new-lesson: export FELAB_NEW_NAME := $(value NAME)
new-lesson: $(STAMP) ## create lessons/N-NAME/ that already runs: make new-lesson N=07 NAME=batching
	@test -n "$$FELAB_NEW_N" -a -n "$$FELAB_NEW_NAME" || { echo "usage: make new-lesson N=07 NAME=batching"; exit 2; }
	@$(PY) -m felab new-lesson -- "$$FELAB_NEW_N" "$$FELAB_NEW_NAME"

bundle: $(call EXTRA,course) ## the lesson pages as an offline site in build/bundle/, your numbers filled from results/
	@$(PY) -m felab bundle build

.PHONY: course-errata
course-errata: $(STAMP) ## for the instructor: where the course pages (../shared/seeds, or PAGES=...) and the kit differ
	@$(PY) -m felab.course.errata $(PAGES)

bundle-serve: bundle ## open the lesson pages at http://127.0.0.1:8770/ (Ctrl+C stops; always the same address)
	@$(PY) -m felab bundle serve

engines: $(call EXTRA,engines) ## install MLX (its CPU build on Linux) and the tiny model's packages into .venv

llama-server: ## build llama.cpp's llama-server from source into .tools/bin (no Homebrew needed; 6-20 min on 2 cores)
	@bash scripts/build_llama_server.sh

tiny-model: $(call EXTRA,engines) ## write the offline tiny model (random weights, gibberish) to .tools/tiny-model
	@$(PY) -m felab.tiny_model

test-engines: $(call EXTRA,engines) $(call EXTRA,dev) ## real llama.cpp and MLX with the tiny model (each skips, saying why, if missing)
	$(PY) -m pytest -m engines tests/engines

test-load: $(call EXTRA,dev) ## load and slow clients on 127.0.0.1: hung-up prompts, trickled requests; a real Dask cluster (~1 min)
	$(PY) -m pytest -m load tests

docs: $(STAMP) ## rewrite the docs' tables that restate code (flags, targets, .env.example) from it; a no-op when up to date
	@$(PY) -m felab.docs_gen

lint: $(call EXTRA,dev) ## ruff (lint and format) over the kit, and mypy over felab/
	$(PY) -m ruff check felab lessons tests
	$(PY) -m ruff format --check felab lessons tests
	$(PY) -m mypy

test: lint ## lint, then the tests, offline (not the engines or load ones: make test-engines, make test-load)
	$(PY) -m pytest -n 4

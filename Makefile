# Parsley for Python: developer commands.
#
#   make test    create .venv if needed, install the project with its test extra, start a
#                local Kafka broker with parsley-devbroker (unless KAFKA_BOOTSTRAP_SERVERS
#                is set), run every test in three phases on that broker (the tests not
#                marked serial in TEST_WORKERS pytest-xdist workers; those marked serial in
#                SERIAL_LANES lanes, one test at a time in each; last, the 3-broker
#                cluster's tests and the other load tests, one at a time, or in
#                LOAD_LANES lanes), stop the broker (also on failure or
#                Ctrl-C) and exit non-zero when any phase fails. Extra pytest arguments,
#                given to every phase: make test PYTEST_ARGS=-x; one process, no xdist:
#                make test TEST_WORKERS=0
#   make lint    ruff over the repository
#   make venv    only create .venv and install the project with its test extra
#   make demo    create .venv if needed and run the mailing-list demo (it starts its own
#                broker); extra flags: make demo DEMO_ARGS="--all" or "--bootstrap-servers H:P"

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
DEVBROKER := $(VENV)/bin/parsley-devbroker
STAMP := $(VENV)/.parsley-installed
PYTEST_ARGS ?=
# Workers of the parallel phase: three times the CI machine's 2 cores, as those tests mostly
# wait on the broker (README.md, "Run the tests"): with 4 the cores stood 45-80 % idle for
# most of the phase; 6 took it from 7:10 to 6:00 on the same machine.
TEST_WORKERS ?= 6
# Lanes of the serial phase: one per xdist_group of its tests (two halves of the private
# broker's tests, each on a private broker of its own; the rest's: tests/conftest.py);
# within a lane, one test at a time.
SERIAL_LANES ?= 3
# Lanes of the load phase (2: the 3-broker cluster's tests beside the other load tests').
# 1 by default: two lanes load the cluster's chaos tests more heavily (README.md, "Run the
# tests").
LOAD_LANES ?= 1
DEMO_ARGS ?=

.PHONY: test lint venv demo demo-data

venv: $(STAMP)

# The native core (native/) is rebuilt by the same install when its sources change.
NATIVE_SRC := native/Cargo.toml $(wildcard native/Cargo.lock native/src/*.rs native/src/*/*.rs)

# Debian 12's cargo (1.65) reads crates.io through a full clone of its git index unless the
# sparse protocol (stable from cargo 1.68, the default from 1.70) is switched on, which that
# cargo allows only as an unstable option: these variables do so for a cargo older than 1.68.
CARGO_MINOR := $(shell cargo --version 2>/dev/null | sed -n 's/^cargo 1\.\([0-9]*\)\..*/\1/p')
OLD_CARGO_ENV := $(if $(CARGO_MINOR),$(shell [ "$(CARGO_MINOR)" -lt 68 ] && echo "CARGO_UNSTABLE_SPARSE_REGISTRY=true RUSTC_BOOTSTRAP=1"))

$(STAMP): setup.cfg pyproject.toml $(NATIVE_SRC)
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@echo "make: installing the project into $(VENV) and building its native core (native/, Rust; the first time takes a few minutes)"
	$(OLD_CARGO_ENV) $(VPY) -m pip install --quiet -e ".[test]"
	touch $@

# The three phases of README.md, "Run the tests", each under a short --basetemp
# (/tmp/ptXXXX/p, not /tmp/pytest-of-<user>/pytest-<n>/popen-gw<i>): a test's coordinator
# socket path lives under its tmp_path, and an ipc:// path may be 107 bytes at most.
# pytest's exit status 5 (no tests collected) in a phase is not a failure when another
# phase ran tests (PYTEST_ARGS may select only one phase's tests); in all it is, as
# pytest's own 5. The first phase's failing status is make test's.
# Each phase ends with its slowest tests (a --durations in PYTEST_ARGS wins: .ci/run asks
# for 25), so a log shows where the minutes went.
DURATIONS ?= --durations=10
XDIST_ARGS := $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)
LOAD_XDIST_ARGS := $(if $(filter-out 0,$(TEST_WORKERS)),$(if $(filter-out 0 1,$(LOAD_LANES)),-n $(LOAD_LANES) --dist loadgroup))
SERIAL_XDIST_ARGS := $(if $(filter-out 0,$(TEST_WORKERS)),$(if $(filter-out 0 1,$(SERIAL_LANES)),-n $(SERIAL_LANES) --dist loadgroup))
define RUN_PHASES
parallel=0; $(VPY) -m pytest tests --phase parallel --basetemp "$$bt/p" $(DURATIONS) $(XDIST_ARGS) $(PYTEST_ARGS) || parallel=$$?; \
serial=0; $(VPY) -m pytest tests --phase serial --basetemp "$$bt/s" $(DURATIONS) $(SERIAL_XDIST_ARGS) $(PYTEST_ARGS) || serial=$$?; \
load=0; $(VPY) -m pytest tests --phase load --basetemp "$$bt/l" $(DURATIONS) $(LOAD_XDIST_ARGS) $(PYTEST_ARGS) || load=$$?; \
echo "make test: parallel phase exited $$parallel, serial phase exited $$serial, load phase exited $$load"; \
status=0; ran=0; \
for code in $$parallel $$serial $$load; do \
  if [ "$$code" -eq 0 ]; then ran=1; elif [ "$$code" -ne 5 ] && [ "$$status" -eq 0 ]; then status=$$code; fi; \
done; \
if [ "$$status" -eq 0 ] && [ "$$ran" -eq 0 ]; then status=5; fi
endef

# The tests' tmp dirs (/tmp/ptXXXX) are kept when a phase failed (their logs), removed otherwise.
test: $(STAMP)
	@bt=$$(mktemp -d "/tmp/ptXXXX") || exit 1; \
	keep_or_remove() { if [ "$${status:-1}" -eq 0 ]; then rm -rf "$$bt"; else echo "make test: the tests' tmp dirs are kept in $$bt" >&2; fi; }; \
	if [ -n "$${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then \
	  trap 'keep_or_remove' EXIT; \
	  trap 'exit 130' INT TERM; \
	  echo "make test: using KAFKA_BOOTSTRAP_SERVERS=$$KAFKA_BOOTSTRAP_SERVERS"; \
	  $(RUN_PHASES); \
	  exit $$status; \
	fi; \
	dir=$$(mktemp -d "$${TMPDIR:-/tmp}/parsley-devbroker-XXXXXX"); \
	trap '$(DEVBROKER) down --dir "$$dir" || true; rm -rf "$$dir"; keep_or_remove' EXIT; \
	trap 'exit 130' INT TERM; \
	out=$$($(DEVBROKER) up --dir "$$dir") || exit 1; \
	bootstrap=$$(printf '%s\n' "$$out" | tail -n 1 | sed -n 's/^bootstrap.servers=//p'); \
	[ -n "$$bootstrap" ] || { echo "make test: parsley-devbroker up printed no bootstrap address" >&2; exit 1; }; \
	echo "make test: broker $$bootstrap, log $$dir/logs/server.log"; \
	export KAFKA_BOOTSTRAP_SERVERS=$$bootstrap; \
	$(RUN_PHASES); \
	[ "$$status" -eq 0 ] || echo "make test: pytest exited $$status" >&2; \
	exit $$status

lint: $(STAMP)
	$(VPY) -m ruff check .

# The demo's data is not in the repository (README, "See it work: make demo"): look for it before the
# install, as examples/mailing_list/threads.py resolve_data_path does (--data in DEMO_ARGS,
# else $$PARSLEY_DEMO_DATA, else the default beside the clone).
DEMO_DATA_DEFAULT := ../shared/data/lkml-linux-ext4/messages.jsonl

demo: demo-data $(STAMP)
	$(VPY) -m examples.mailing_list.demo $(DEMO_ARGS)

demo-data:
	@case " $(DEMO_ARGS) " in *" --data"*) exit 0;; esac; \
	data="$${PARSLEY_DEMO_DATA:-$(DEMO_DATA_DEFAULT)}"; \
	[ -f "$$data" ] && exit 0; \
	echo "make demo: mailing-list data not found: $$data" >&2; \
	echo "  The demo reads lkml-linux-ext4/messages.jsonl, which is not in the repository" >&2; \
	echo "  (README, \"See it work: make demo\"). Put it at $(DEMO_DATA_DEFAULT) (beside the clone)," >&2; \
	echo "  or point to it: PARSLEY_DEMO_DATA=PATH make demo, or make demo DEMO_ARGS=\"--data PATH\"." >&2; \
	exit 2

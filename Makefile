# `make demo` and `make test` do all the set-up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-traffic test test-sglang test-stress lint sshd chromium postgres docker slurm clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sweeper optimize --study demo --trials 40 --fresh --yes
	$(BIN)/sweeper report --study demo

# Two concurrency levels (1 and 16), a winner per level (studies/demo-traffic.yaml).
demo-traffic: $(STAMP)
	$(BIN)/sweeper optimize --study demo-traffic --trials 12 --fresh --yes
	$(BIN)/sweeper report --study demo-traffic

# The SSH tests start a real OpenSSH server on loopback: make sure the binary is there.
sshd:
	@test -x /usr/sbin/sshd || { \
	  echo "installing openssh-server (for the SSH tests)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openssh-server >/dev/null; }

# The dashboard and report tests drive Debian's headless Chromium through chromedriver.
chromium:
	@{ test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; } || { \
	  echo "installing chromium and chromium-driver (for the browser tests)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; }

# The container tests start a Docker daemon of their own (tests/dockerd.py): Debian's docker.io
# provides dockerd and the CLI; its packaged service is not started or used.
docker:
	@{ test -x /usr/sbin/dockerd && command -v docker >/dev/null; } || { \
	  echo "installing docker.io (for the container tests)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends docker.io >/dev/null; }

# The Slurm tests start a single-node cluster of their own (tests/slurmd.py) from Debian's
# slurm-wlm; its packaged services are not started or used.
slurm:
	@{ test -x /usr/sbin/slurmctld && test -x /usr/sbin/slurmd && command -v srun >/dev/null; } || { \
	  echo "installing slurm-wlm (for the Slurm tests)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends slurm-wlm >/dev/null; }

# The storage tests use the PostgreSQL on 127.0.0.1:5432 when it answers; otherwise they
# install Debian's postgresql, start its cluster and let local TCP connections in.
postgres:
	@pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null || { \
	  echo "starting PostgreSQL (for the storage tests)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  test -d /etc/postgresql || { $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; }; \
	  v=$$(ls /etc/postgresql | sort -V | tail -1); \
	  grep -q "sweeper tests" /etc/postgresql/$$v/main/pg_hba.conf || \
	    printf '# sweeper tests: local TCP without a password\nhost all all 127.0.0.1/32 trust\n' | \
	    $$SUDO sh -c "cat - /etc/postgresql/$$v/main/pg_hba.conf > /tmp/pg_hba.new && \
	      mv /tmp/pg_hba.new /etc/postgresql/$$v/main/pg_hba.conf"; \
	  $$SUDO pg_ctlcluster --skip-systemctl-redirect $$v main start || \
	    $$SUDO pg_ctlcluster --skip-systemctl-redirect $$v main reload; \
	  for i in $$(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done; }

# Most tests wait on real processes (server start-ups, benchmarks, kill -9 and resume), so
# they run three at a time, a test file per worker, deadlines doubled (tests/timeouts.py);
# the few that measure the simulator's wall-clock tok/s (marker `timing`) run alone
# afterwards, always: also when the first part failed (make would stop there and they
# would go unreported); the target fails if either part did. A wall clock on a shared
# 2-core VM can be slowed mid-test where the quiet check before it saw nothing
# (tests/quiet.py): a timing test that misses is measured once more, alone, and fails the
# target when it misses twice.
test: $(STAMP) sshd chromium postgres docker slurm
	@rc=0; \
	SWEEPER_TEST_TIMEOUT_FACTOR=2 $(BIN)/python -m pytest -q -n 3 --dist loadfile -m "not timing" --durations=15 || rc=$$?; \
	echo "== the timing tests (the simulator's wall-clock tok/s), alone: =="; \
	$(BIN)/python -m pytest -q -rs -m "timing and not sglang" || { \
	  echo "== a timing test missed: the ones that failed, measured once more =="; \
	  $(BIN)/python -m pytest -q -rs -m "timing and not sglang" --last-failed --last-failed-no-failures none \
	    || rc=$$?; }; \
	exit $$rc

# The tests against the REAL SGLang 0.5.23 (tests/sglang/, marked `sglang`, left out of
# `make test`): CPU-only, a tiny random Llama made locally. SGLang lives in a venv cached
# outside the clone (~11 GB, ~9 min to install once); the stamp file is written last, so an
# interrupted install is redone, never half-used. SGLANG_VENV moves it.
SGLANG_VERSION := 0.5.23
SGLANG_CACHE ?= $(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME)/sweeper,$(if $(filter 0,$(shell id -u)),/var/cache/sweeper,$(HOME)/.cache/sweeper))
SGLANG_VENV ?= $(SGLANG_CACHE)/sglang-$(SGLANG_VERSION)
SGLANG_STAMP := $(SGLANG_VENV)/.sweeper-complete

$(SGLANG_STAMP):
	@echo "installing SGLang $(SGLANG_VERSION) into $(SGLANG_VENV) (once; ~9 min, ~11 GB)"
	test -x $(SGLANG_VENV)/bin/python || $(PY) -m venv $(SGLANG_VENV)
	@start=$$(date +%s); \
	$(SGLANG_VENV)/bin/pip install -q --upgrade pip && \
	$(SGLANG_VENV)/bin/pip install -q sglang==$(SGLANG_VERSION) && \
	$(SGLANG_VENV)/bin/python -c "import importlib.metadata as m; assert m.version('sglang') == '$(SGLANG_VERSION)'" && \
	echo "SGLang $(SGLANG_VERSION) installed in $$(( $$(date +%s) - start )) s"
	echo "sglang==$(SGLANG_VERSION)" > $(SGLANG_STAMP)

# as `make test`: the tests that compare wall-clock tok/s (SGLang's clients against the
# simulator) run alone afterwards, and one that misses is measured once more
test-sglang: $(STAMP) $(SGLANG_STAMP)
	@rc=0; export SWEEPER_SGLANG_PYTHON=$(SGLANG_VENV)/bin/python SWEEPER_TEST_TIMEOUT_FACTOR=2; \
	$(BIN)/python -m pytest -q -m "sglang and not timing" --durations=0 tests/sglang || rc=$$?; \
	echo "== SGLang's clients against the simulator's wall-clock tok/s, alone: =="; \
	$(BIN)/python -m pytest -q -rs -m "sglang and timing" tests/sglang || { \
	  echo "== a timing test missed: the ones that failed, measured once more =="; \
	  $(BIN)/python -m pytest -q -rs -m "sglang and timing" --last-failed \
	    --last-failed-no-failures none tests/sglang || rc=$$?; }; \
	exit $$rc

# The SSH and sweep tests while a CPU burner keeps every core busy (tests/stress.py).
test-stress: $(STAMP) sshd
	$(BIN)/python tests/stress.py

lint: $(STAMP)
	$(BIN)/ruff check sweeper tests bench tools
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache

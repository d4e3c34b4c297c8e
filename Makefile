# `make demo` and `make test` do all the set-up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint sshd chromium clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sweeper optimize --study demo --trials 40 --fresh --yes
	$(BIN)/sweeper report --study demo

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

test: $(STAMP) sshd chromium
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check sweeper tests bench

clean:
	rm -rf $(VENV) .pytest_cache

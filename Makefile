# The two commands of the README: `make run` and `make test`. Both set up what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
# The integration modules run a second time with every daemon on the asyncio reactor (README.md, Tests)
ASYNCIO_TESTS := $(addprefix tests/integration/,test_calls.py test_batch.py test_chain.py test_sessions.py \
	test_webhooks.py test_ping.py test_throttle.py test_lifecycle.py test_reload.py test_postgresql.py)

.PHONY: run test check system-deps clean

$(INSTALLED): pyproject.toml tests/sample_plugin/pyproject.toml tests/compat_plugin/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,check,postgresql,asyncio]' -e tests/sample_plugin -e tests/compat_plugin
	touch $@

run: $(INSTALLED)
	$(BIN)/apid migrate
	@echo
	@echo "To make the first administrator, run in another terminal:"
	@echo "  $(BIN)/apid user add admin --email admin@example.com --role ROLE_ADMIN"
	@echo
	$(BIN)/apid serve

# the gates before the tests: lint, formatting, types, the layering contract (pyproject.toml configures each)
check: $(INSTALLED)
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy
	$(BIN)/lint-imports

system-deps:
	scripts/system-deps

# A process per CPU and one more run tests, a whole test file each (its daemon and fixtures are
# started once), and the asyncio pass runs beside them, its output shown once both passes end:
# integration tests spend much of their time waiting on daemons, clocks and peers.
PARALLEL := -n $(shell expr $$(nproc) + 1) --dist loadfile
ASYNCIO_LOG := var/asyncio-pass.log

# Both passes copy the databases they migrate and fill alike from one folder (tests/harness.py).
test: $(INSTALLED) system-deps
	@mkdir -p var
	export APID_TEST_TEMPLATES=$$(mktemp -d -t apid-test-templates-XXXXXX); \
	APID_TEST_REACTOR=asyncio $(BIN)/pytest -p no:cacheprovider $(ASYNCIO_TESTS) > $(ASYNCIO_LOG) 2>&1 & \
	asyncio=$$!; $(BIN)/pytest $(PARALLEL); first=$$?; wait $$asyncio; second=$$?; \
	rm -rf "$$APID_TEST_TEMPLATES"; \
	echo "The asyncio pass (APID_TEST_REACTOR=asyncio, $(ASYNCIO_LOG)):"; cat $(ASYNCIO_LOG); \
	exit $$(( first || second ))

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis .import_linter_cache

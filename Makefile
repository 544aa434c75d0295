# The two commands a fresh machine needs: `make serve` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

WHEELS ?= dist/wheels

.PHONY: serve test venv clean wheels install-wheels bench

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

serve: $(STAMP)
	exec $(BIN)/ai-admission serve

test: $(STAMP)
	$(BIN)/python -m pytest

# The image's install steps (the Dockerfile runs these two, and so does the test of the image's install):
# build wheels of the package and its dependencies, then install them with no index, as the final image does.
wheels:
	$(PYTHON) -m pip wheel --quiet --wheel-dir $(WHEELS) .

install-wheels:
	$(PYTHON) -m pip install --quiet --no-index --find-links $(WHEELS) ai-admission

# Load test against the running server and a minimal Flask app (same gunicorn config); see BENCHMARKS.md.
bench: $(STAMP)
	command -v wrk >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk)
	$(BIN)/python -m tests.bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) certs/dev .pytest_cache dist

# The two commands a fresh machine needs: `make serve` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: serve test venv clean

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

clean:
	rm -rf $(VENV) certs/dev .pytest_cache

# The two commands a fresh machine needs: `make serve` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

WHEELS ?= dist/wheels

# The admission core compiled with mypyc next to its sources (see setup.py); rebuilt when any source changes.
COMPILED := $(VENV)/.compiled

.PHONY: serve test venv compile pure clean wheels install-wheels bench bench-e2e mutation e2e-deps

# The editable install itself stays interpreted; `compile` builds the compiled modules in place, once.
$(STAMP): setup.cfg pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	AI_ADMISSION_PURE_PYTHON=1 $(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# Without a C compiler the build fails and ai-admission runs interpreted: slower, the same verdicts. The stamp
# records which build this is ("compiled" or "pure"), and the tests check that the server runs exactly that.
# The touch: an edit that leaves the generated C as it was (a comment) is not relinked, and the modules must
# not look older than their sources (webhook.compiled refuses stale ones).
CORE_SOURCES := $(shell find webhook/core -name '*.py')
BUILT = find webhook -name '*.so'

$(COMPILED): $(STAMP) $(CORE_SOURCES)
	@echo "compiling the admission core (webhook/core) with mypyc (a minute or two, then only after a change)"
	@$(BIN)/python setup.py --quiet build_ext --inplace >$(VENV)/compile.log 2>&1 && $(BUILT) -exec touch {} + \
	  || { $(MAKE) --no-print-directory pure; echo "warning: compiling failed (see $(VENV)/compile.log); running interpreted"; }
	@if [ -n "$$($(BUILT))" ]; then echo compiled; else echo pure; fi >$(COMPILED)

compile: $(COMPILED)

# Drop the compiled modules from the checkout (`make compile` brings them back).
pure:
	$(BUILT) -delete
	rm -f $(COMPILED)

serve: $(COMPILED)
	exec $(BIN)/ai-admission serve

test: e2e-deps $(COMPILED)
	$(BIN)/python -m pytest

# etcd and kube-apiserver for the end-to-end tests (tests/control_plane.py finds them). etcd: Debian's etcd-server,
# installed only when no etcd is found and we are root (CI runs as root on a fresh machine). kube-apiserver:
# unpacked from ../shared/k8s into ~/.cache/ai-admission/k8s and verified against its SHA256SUMS. Best effort:
# what cannot be had makes the e2e tests skip with one line saying so; only a binary failing its checksum fails.
e2e-deps: $(STAMP)
	@if [ ! -x "$${KUBEBUILDER_ASSETS:-/nonexistent}/etcd" ] && ! command -v etcd >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing etcd-server (Debian) for the end-to-end tests"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server; } \
	      >$(VENV)/apt-etcd.log 2>&1 \
	      || { tail -n 5 $(VENV)/apt-etcd.log; echo "warning: could not install etcd-server; the e2e tests will skip"; }; \
	  fi; \
	fi
	@$(BIN)/python -m tests.control_plane --prepare

# The image's install steps (the Dockerfile runs these two, and so does the test of the image's install):
# build wheels of the package and its dependencies, then install them with no index, as the final image does.
wheels:
	$(PYTHON) -m pip wheel --quiet --wheel-dir $(WHEELS) .

install-wheels:
	$(PYTHON) -m pip install --quiet --no-index --find-links $(WHEELS) ai-admission

# Load test against the running server and a minimal Flask app (same gunicorn config); see BENCHMARKS.md.
bench: $(COMPILED)
	command -v wrk >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk)
	$(BIN)/python -m tests.bench.run $(BENCH_ARGS)

# Pod admission through a real kube-apiserver with no webhook, a minimal Flask app, a Go "allowed" server (when
# Debian's golang-go can be had) and ai-admission registered as the webhooks; see BENCHMARKS.md.
bench-e2e: e2e-deps $(COMPILED)
	command -v go >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go) \
	  || echo "no Go: the Go floor is left out"
	$(BIN)/python -m tests.bench.e2e $(BENCH_ARGS)

# Mutation testing of the policy core with mutmut (see README, Testing); not part of `make test` or CI: it runs
# the fast in-process tests against each of about 2,000 mutants (settings under [mutmut] in setup.cfg). It
# works on an interpreted copy in .mutation/, where no compiled module can shadow a mutated source.
MUTATION := .mutation
mutation: $(STAMP)
	$(BIN)/pip install --quiet 'mutmut>=3.8,<4'
	rm -rf $(MUTATION) && mkdir -p $(MUTATION)
	tar --exclude='*.so' --exclude=__pycache__ -cf - webhook tests rules certs setup.cfg pyproject.toml | tar -xf - -C $(MUTATION)
	cd $(MUTATION) && ../$(BIN)/mutmut run --max-children 2 >mutmut.log 2>&1; ../$(BIN)/mutmut results
	@echo "survivors: cd $(MUTATION) && ../$(BIN)/mutmut show <name>; the whole log: $(MUTATION)/mutmut.log"

clean: pure
	rm -rf $(VENV) certs/dev .pytest_cache dist build $(MUTATION)

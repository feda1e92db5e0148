# Two commands: `make lab` (open the labs) and `make test` (run every test).
# Both create .venv and install what is missing first. See README.md.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: lab test install doctor bench record site clean

$(STAMP): pyproject.toml tools/install.sh
	bash tools/install.sh "$(PYTHON)" "$(VENV)"
	touch $(STAMP)

install: $(STAMP)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=labs

test: $(STAMP)
	bash tools/browser_deps.sh
	$(PY) -m pytest tests labs --nbval --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider $(PYTEST_ARGS)

doctor: $(STAMP)
	$(PY) -m infralens_lab doctor

bench: $(STAMP)
	$(PY) -m infralens_lab bench

site: $(STAMP)
	$(PY) -m infralens_lab site --out site

clean:
	rm -rf $(VENV) site artifacts

# Two commands: `make lab` (open the labs) and `make test` (run every test).
# Both create .venv and install what is missing first. See README.md.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Two installs, each with its stamp: the full one (STAMP: the package with its test extra, pip's output shown;
# `make test` and the rest) and the learner's (LAB_STAMP: what the labs need, pip's output in .venv/install.log
# unless pip fails; `make lab`). The full install stamps both: it holds everything the learner's has.
STAMP  := $(VENV)/.installed
LAB_STAMP := $(VENV)/.installed-lab
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (auto: one per CPU core). --dist loadfile keeps each test file whole on
# one worker, and tests/conftest.py (SAME_WORKER) puts the files that share a session fixture on the same one;
# TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= auto

.PHONY: lab test install doctor bench gates-gpu record site grade notebooks clean

$(STAMP): pyproject.toml tools/install.sh
	bash tools/install.sh "$(PYTHON)" "$(VENV)" test
	touch $(STAMP) $(LAB_STAMP)

$(LAB_STAMP): pyproject.toml tools/install.sh
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ] && [ $(STAMP) -nt tools/install.sh ]; then :; \
	else bash tools/install.sh "$(PYTHON)" "$(VENV)" learner; fi
	@touch $(LAB_STAMP)

install: $(STAMP)

# Serves my-labs/, the learner's git-ignored working copy of labs/ (see tools/lab.sh); the URL is printed last.
PORT ?= 8888
lab: $(LAB_STAMP)
	@PORT="$(PORT)" bash tools/lab.sh "$(VENV)"

# OMP_WAIT_POLICY=PASSIVE (unless set): torch's OpenMP threads sleep when their work runs out instead of spinning
# for it. The workers, their kernels and ranks share the cores, and a spinning thread takes CPU another worker
# needs (tests/test_memory.py beside two busy cores: 11.8 -> 9.3 s of CPU). No result depends on it.
test: $(STAMP)
	bash tools/browser_deps.sh
	$(PY) -m ruff check infralens_lab tests tools
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} $(PY) -m pytest tests labs --nbval --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider --durations=25 \
	    -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

doctor: $(STAMP)
	$(PY) -m infralens_lab doctor

bench: $(STAMP)
	$(PY) -m infralens_lab bench

# Count gates (interpreter mode; data/gates.json keys the counts that differ by build, peak bytes, to the build
# they were measured on: on a CUDA wheel they are held to counts_by_build's entry for it, else left out with the
# reason printed), then the time-ratio gates (GPU) against the reference set's own recorded gate samples.
gates-gpu: $(STAMP)
	INFRALENS_MODE=interpreter $(PY) -m infralens_lab gates --counts
	$(PY) -m infralens_lab gates --ratios

# Grade a folder of submitted notebooks: `make grade SUBMISSIONS=path/` (see docs/instructors.md).
# RUN=1 (default) also executes each notebook, isolated: its own process, session and scratch copy, at most
# TIMEOUT seconds, and whatever it leaves running is killed. RUN=0 grades from the files alone and executes
# no submitted code (no sandbox needed). Scores and class_report.html are written once, at the end.
# BUDGET=seconds caps all runs together (RUN=1): what is left is "not run: budget", scored from the file.
# JOBS=N runs up to N notebooks at once (RUN=1; default: one per CPU core, 1 on a GPU machine), each isolated; rows as
# JOBS=1 (a change found while several ran is pinned down by running those again one at a time).
SUBMISSIONS ?=
SCORES ?= scores.csv
RUN ?= 1
TIMEOUT ?= 120
BUDGET ?=
JOBS ?=
GRADE_EXEC := $(if $(filter 0,$(RUN)),,--infralens-run --infralens-timeout=$(TIMEOUT) $(if $(BUDGET),--infralens-budget=$(BUDGET)) $(if $(JOBS),--infralens-jobs=$(JOBS)))
GRADE_ROOT := infralens_lab/quiz/grade_root
grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=path/to/notebooks/ [SCORES=scores.csv] [RUN=0] [TIMEOUT=120] [JOBS=N] [BUDGET=s]"; exit 2; }
	@test -e "$(SUBMISSIONS)" || { echo "make grade: SUBMISSIONS=$(SUBMISSIONS) does not exist; expected a folder of submitted .ipynb notebooks" >&2; exit 2; }
	@case "$(RUN)" in 0|1) ;; *) echo "make grade: RUN=$(RUN); expected 1 (execute the notebooks, isolated) or 0 (read the files only)" >&2; exit 2;; esac
	@case "$(JOBS)" in ''|[1-9]|[1-9][0-9]|[1-9][0-9][0-9]) ;; *) echo "make grade: JOBS=$(JOBS); expected a whole number of notebooks to run at once, 1 to 999 (default: one per CPU core)" >&2; exit 2;; esac
	@# pytest imports a conftest.py in the folder it is given before the grader can check anything: refuse first
	@test "$$(ls -A $(GRADE_ROOT))" = "pytest.ini" || { echo "make grade: refusing to grade: $(GRADE_ROOT) holds $$(ls -A $(GRADE_ROOT) | tr '\n' ' '); expected only pytest.ini (pytest would import a conftest.py there). If you did not put them there, a submission's code may have (RUN=1): delete all but pytest.ini" >&2; exit 2; }
	@# pytest exits 1 when some answers are wrong: that is a result, not an error; 2 and up are errors
	@# (an unwritable SCORES path or changed grader files are refused before any notebook runs). The grader,
	@# not the notebooks, decides every score: see docs/instructors.md (and run untrusted work in a sandbox).
	@# pytest is pointed at the grader's own empty folder (its ini, rootdir and conftest cut), loads no plugin but
	@# the grader's, and is handed the submissions by the plugin: no conftest.py or test file there is imported.
	rc=0; PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(PY) -m pytest -c $(GRADE_ROOT)/pytest.ini --rootdir=$(GRADE_ROOT) \
	    --confcutdir=$(GRADE_ROOT) -p infralens_lab.quiz.pytest_plugin -p no:cacheprovider \
	    --infralens-grade $(GRADE_EXEC) --infralens-submissions="$(SUBMISSIONS)" \
	    --infralens-score-csv "$(SCORES)" $(PYTEST_ARGS) $(GRADE_ROOT) || rc=$$?; \
	if [ $$rc -le 1 ]; then echo "scores written to $(SCORES)"; \
	else echo "make grade: pytest stopped with status $$rc (see above); no scores written" >&2; fi; \
	test $$rc -le 1

# Re-execute the labs in place, as they are committed: on a machine without a GPU, mode auto
# (interpreter), so nbval on CI reproduces the outputs.
notebooks: $(STAMP)
	@! nvidia-smi -L >/dev/null 2>&1 || { echo "make notebooks: this machine has a GPU; committed labs are executed without one (interpreter mode, recorded evidence)"; exit 2; }
	$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace labs/*.ipynb

# The offline edition; each question carries its folded answer key (the bank's answer and explanation).
# KEY=0 leaves the key out (a copy to hand learners before the answers are due).
KEY ?= 1
site: $(STAMP)
	@case "$(KEY)" in 0|1) ;; *) echo "make site: KEY=$(KEY); expected 1 (fold the answer key under each question) or 0 (leave it out)" >&2; exit 2;; esac
	$(PY) -m infralens_lab site --out site $(if $(filter 0,$(KEY)),--no-key,)

clean:
	rm -rf $(VENV) site artifacts

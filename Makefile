# tfcourse. `make lab` opens the course in JupyterLab, `make test` runs every test.
# Both create .venv on first use and reinstall only when requirements/lock.txt changes.
PYTHON      ?= python3
VENV        := .venv
BIN         := $(VENV)/bin
LOCK        := requirements/lock.txt
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
ARGS        ?=
NB          ?=
# JupyterLab refuses to run as root unless told to.
ROOT_FLAG   := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: help lab test notebooks rounding lint lock clean

help:
	@echo "make lab        set up .venv, open the course in JupyterLab (ARGS=\"--no-browser --port 8890\")"
	@echo "make test       set up .venv, run every test (ARGS=\"-k attention\" to select)"
	@echo "make notebooks  re-execute notebooks in place, stored outputs refreshed (NB=01_attention for one)"
	@echo "make rounding   nbval under conditions that change float rounding (NB=04_feed_forward_and_norm)"
	@echo "make lint       ruff over the package, tests and exercises"
	@echo "make lock       re-resolve requirements/lock.txt from pyproject.toml (maintainers)"
	@echo "make clean      remove .venv and caches"

$(VENV)/.installed: $(LOCK) pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# The CPU torch build comes from PyTorch's own index when no configured index has it.
	$(BIN)/python -m pip install -r $(LOCK) \
	  || $(BIN)/python -m pip install --extra-index-url $(TORCH_INDEX) -r $(LOCK)
	$(BIN)/python -m pip install --no-deps --no-build-isolation -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name tfcourse --display-name "Python (tfcourse)"
	@# No "get notified about Jupyter news?" pop-up: the course runs offline. Widgets' state is
	@# saved, so that `make lab`'s pre-save hook can store a progress bar as its last line.
	@mkdir -p $(VENV)/share/jupyter/lab/settings && echo \
	  '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},' \
	  '"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": true}}' \
	  > $(VENV)/share/jupyter/lab/settings/overrides.json
	@touch $@

# JupyterLab as the course needs it: it opens the start page with the file browser at the
# course's folder; its terminals, however opened, start there with the course's environment
# activated (tools/lab-bashrc); it offers the course's kernel only; a notebook is saved with
# its widgets as text, which a reopened notebook can show (tfcourse/lab.py). Its kernels'
# OpenMP threads sleep while they wait instead of spinning on a core that another program
# needs (README, "A busy computer").
lab: $(VENV)/.installed
	TFCOURSE_ROOT="$(CURDIR)" TFCOURSE_VENV="$(CURDIR)/$(VENV)" OMP_WAIT_POLICY=PASSIVE \
	  $(BIN)/jupyter lab $(ROOT_FLAG) --ServerApp.root_dir=. \
	  --LabApp.default_url='/lab/tree/notebooks/00_start_here.ipynb?file-browser-path=/' \
	  --ServerApp.terminado_settings='{"shell_command": ["bash", "--init-file", "$(CURDIR)/tools/lab-bashrc"]}' \
	  --KernelSpecManager.allowed_kernelspecs=tfcourse --MappingKernelManager.default_kernel_name=tfcourse \
	  --ContentsManager.pre_save_hook=tfcourse.lab.pre_save \
	  $(ARGS)

test: $(VENV)/.installed
	$(BIN)/python -m pytest $(ARGS)

notebooks: $(VENV)/.installed
	$(BIN)/python tools/execute_notebooks.py $(NB)

rounding: $(VENV)/.installed
	$(BIN)/python tools/nbval_rounding.py $(NB)

lint: $(VENV)/.installed
	$(BIN)/ruff check tfcourse tests exercises tools benchmarks

lock:
	rm -rf /tmp/tfcourse-lock && $(PYTHON) -m venv /tmp/tfcourse-lock
	/tmp/tfcourse-lock/bin/pip install --extra-index-url $(TORCH_INDEX) "torch==2.13.0+cpu" -e ".[lab,test]"
	{ sed -n -e '/^#/p' -e '/^torch==/p' $(LOCK); /tmp/tfcourse-lock/bin/pip freeze --all \
	  --exclude-editable | grep -v -e '^torch==' -e '^pip=='; } > $(LOCK).new && mv $(LOCK).new $(LOCK)

clean:
	rm -rf $(VENV) .pytest_cache
	find . -name __pycache__ -prune -exec rm -rf {} +

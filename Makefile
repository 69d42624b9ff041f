# One entry point for people and CI: `make demo` shows the main job, `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# pip's download cache would hold a second copy of every wheel: the LeRobot venvs alone pull two CUDA
# builds of torch (~3 GB of wheels each), and a CI machine with a few GB free runs out of disk on them.
export PIP_NO_CACHE_DIR ?= 1

.PHONY: help venv energon6 tfds lerobot doctor test test-all test-deps test-fast demo lint bench system-deps clean bench-quick bench-peers bench-lerobot bench-rlds-peer

help:
	@echo "make demo   - make a small dataset, prepare it, read samples at random"
	@echo "make test   - install everything the tests need and run the suite but the tests marked slow"
	@echo "              (as root it also apt-get installs FUSE 3 and Ceph system-wide: see README)"
	@echo "make test-all - the same with the tests marked slow (the long LeRobot paths, fuzzing, ...)"
	@echo "make test-fast - the suite without the tests marked slow and no installs, stopping at the first failure"
	@echo "make lint   - ruff and mypy"
	@echo "make bench  - the benchmarks of tools/bench (large data, minutes)"
	@echo "make bench-quick - the same scripts on tiny data (a few minutes; figures mean nothing)"
	@echo "make bench-lerobot - LeRobot loaders: shardstore, LeRobotDataset, lerobot-lancedb (optional; long)"
	@echo "make bench-rlds-peer - RLDS -> LeRobot v3.0: shardstore against LeRobot's own port script (optional)"

# Two steps in one venv: `make demo` needs only the package and Pillow (`.base`, well under a minute);
# `make test` adds the whole tool chain on top (torch, megatron-energon, minari, moto, ruff, mypy, ...).
$(VENV)/.base: pyproject.toml setup.py shardstore/_tarwalk.c shardstore/_fusefast.c
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -e '.[demo]'
	touch $@

$(VENV)/.installed: $(VENV)/.base
	$(PIP) install -q --upgrade pip
	# torch first, pinned: the CPU wheel on this machine's disk, never a CUDA build from the index
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Energon 6.0 in a venv of its own, for the read-compatibility tests (they run its `energon prepare`).
ENERGON6 ?= .venv-energon6
$(ENERGON6)/.installed: tests/compat/energon6-requirements.txt
	$(PYTHON) -m venv $(ENERGON6)
	$(ENERGON6)/bin/python -m pip install -q -r tests/compat/energon6-requirements.txt
	touch $@

energon6: $(ENERGON6)/.installed

# TensorFlow Datasets in a venv of its own, for the RLDS tests (they load exports with the real tfds).
TFDS ?= .venv-tfds
$(TFDS)/.installed: tests/convert/tfds-requirements.txt
	$(PYTHON) -m venv $(TFDS)
	$(TFDS)/bin/python -m pip install -q -r tests/convert/tfds-requirements.txt
	touch $@

tfds: $(TFDS)/.installed

# The real LeRobot in venvs of their own, for the tests that load shardstore's LeRobot outputs with
# LeRobotDataset: lerobot 0.6.1 (v3.0; Python >= 3.12) and lerobot 0.3.3 (v2.1, the last release that
# reads it). Each pins its own torch (CUDA wheels from PyPI: ~5 GB and ~6 GB, 5-10 min each here), numpy
# and PyAV. shardstore[convert] is installed beside lerobot 0.6.1 (pip refuses if their pins conflict;
# the tests run the checkout's code there through PYTHONPATH).
PYTHON312 ?= $(shell for p in $$(command -v python3.12) $$HOME/.pyenv/versions/3.12*/bin/python; do \
  "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo "$$p"; break; }; done)
LEROBOT ?= $(or $(SHARDSTORE_LEROBOT_VENV),.venv-lerobot)
LEROBOT03 ?= $(or $(SHARDSTORE_LEROBOT03_VENV),.venv-lerobot03)
$(LEROBOT)/.installed: tests/compat/lerobot-requirements.txt pyproject.toml
	@test -n "$(PYTHON312)" || { echo "lerobot 0.6 needs Python 3.12: set PYTHON312"; exit 1; }
	$(PYTHON312) -m venv $(LEROBOT)
	$(LEROBOT)/bin/python -m pip install -q -r tests/compat/lerobot-requirements.txt
	$(LEROBOT)/bin/python -m pip install -q -r tests/compat/lerobot-requirements.txt '.[convert]'
	touch $@

$(LEROBOT03)/.installed: tests/compat/lerobot03-requirements.txt
	@test -n "$(PYTHON312)" || { echo "the LeRobot venvs need Python 3.12: set PYTHON312"; exit 1; }
	$(PYTHON312) -m venv $(LEROBOT03)
	$(LEROBOT03)/bin/python -m pip install -q -r tests/compat/lerobot03-requirements.txt
	touch $@

lerobot: $(LEROBOT)/.installed $(LEROBOT03)/.installed

# lerobot-doctor (PyPI) in a venv of its own, for the slow test that holds `check --deep` against it.
DOCTOR ?= .venv-doctor
$(DOCTOR)/.installed:
	$(PYTHON) -m venv $(DOCTOR)
	$(DOCTOR)/bin/python -m pip install -q lerobot-doctor==0.2.0
	touch $@

doctor: $(DOCTOR)/.installed

# System packages the tests need: FUSE 3 (for mount) and Ceph's monitor, OSD and radosgw (the
# `rgw` S3 test server of tools/s3server.py, ~30 s to install). One apt-get for whatever is missing.
RGW_PACKAGES := ceph-mon ceph-osd radosgw
system-deps:
	@need=""; \
	  command -v fusermount3 >/dev/null && [ -e /usr/lib/x86_64-linux-gnu/libfuse3.so.3 -o -e /usr/lib/aarch64-linux-gnu/libfuse3.so.3 ] || need=" fuse3"; \
	  for b in $(RGW_PACKAGES); do command -v $$b >/dev/null || { need="$$need $(RGW_PACKAGES)"; break; }; done; \
	  if [ -z "$$need" ]; then :; \
	  elif [ "$$(id -u)" != 0 ]; then echo "warning: missing$$need and cannot install (not root): tests that need them will skip"; \
	  else (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$need >/dev/null) || \
	    echo "warning: apt-get install$$need failed: tests that need them will skip (fail under CI=true)"; fi

test-deps: venv system-deps energon6 tfds lerobot
	$(PY) tools/s3server.py install

# A test that hits its time limit runs once more, a safety net kept after the two hangs seen under
# load were found and fixed (S3 PUTs waiting for a 100 Continue; multiprocessing.Pool.terminate in
# prepare); pytest's summary still shows any rerun. Any other failure fails at once. The tests marked
# slow (minutes each on this 2-core machine) run in `make test-all`, which keeps `make test` near 20 min.
PYTEST_CI := $(PY) -m pytest -q -p no:cacheprovider --reruns 1 --only-rerun 'Timeout' --durations=25

test: test-deps
	$(PYTEST_CI) -m "not slow" tests

test-all: test-deps doctor
	$(PYTEST_CI) tests

test-fast: venv
	$(PY) -m pytest -q -x -m "not slow" tests

demo: $(VENV)/.base
	$(PY) tools/demo.py
	@echo "shardstore is installed in $(VENV): run \`source $(VENV)/bin/activate\` to put \`shardstore\` on PATH"

lint: venv
	$(PY) -m ruff check shardstore nv_meta_schema tools tests
	$(PY) -m mypy shardstore nv_meta_schema

# Every benchmark on the default dataset (made under /work/benchdata if missing), then the summary
# table and charts of docs/benchmarks.md from their JSON in docs/bench/ (tools/bench/all.py).
bench: venv bench-peers
	$(PY) tools/bench/all.py

bench-quick: venv bench-peers
	$(PY) tools/bench/all.py --quick

# The benchmarks' peers, each in a venv of its own: wids (webdataset 0.2.111, the last with wids;
# it imports torch and conflicts with webdataset 1.0 of .venv) and ratarmount (FUSE).
WIDS_VENV ?= .venv-wids
RATARMOUNT_VENV ?= .venv-ratarmount
$(WIDS_VENV)/.installed:
	$(PYTHON) -m venv $(WIDS_VENV)
	$(WIDS_VENV)/bin/python -m pip install -q torch==2.13.0 webdataset==0.2.111
	touch $@

$(RATARMOUNT_VENV)/.installed:
	$(PYTHON) -m venv $(RATARMOUNT_VENV)
	$(RATARMOUNT_VENV)/bin/python -m pip install -q ratarmount==1.3.0
	touch $@

bench-peers: $(WIDS_VENV)/.installed $(RATARMOUNT_VENV)/.installed

# Optional, never part of `make test`: shardstore's LeRobotDataset drop-in against LeRobotDataset
# (torchcodec, PyAV) and lerobot-lancedb 0.3.1 (installed beside lerobot 0.6.1: it keeps its pins).
$(LEROBOT)/.lancedb: $(LEROBOT)/.installed
	$(LEROBOT)/bin/python -m pip install -q lerobot-lancedb==0.3.1
	touch $@

bench-lerobot: venv $(LEROBOT)/.lancedb
	$(PY) tools/bench/lerobot_loader.py --data /work/benchdata/lerobot-loader --json docs/bench/lerobot-loader.json

# Optional, never part of `make test`: the peer of the RLDS -> LeRobot v3.0 conversion, what LeRobot users
# run today (lerobot's examples/port_datasets/port_droid.py: tensorflow_datasets reads, LeRobotDataset
# writes, in one Python). A bench-only venv on the same Python as $(LEROBOT), which it sees through a .pth
# file (lerobot 0.6.1 and its pins used as they are, that venv never changed), adds tensorflow-cpu and
# tensorflow-datasets at the TFDS venv's pins, held to $(LEROBOT)'s versions (numpy, protobuf, ...) by a
# constraints file: pip fails rather than move one of lerobot's pins. h5py is left free: only
# shardstore[convert] has it there, and tensorflow-cpu 2.21 wants an older one (kept in this venv alone).
LEROBOT_RLDS ?= .venv-lerobot-rlds
$(LEROBOT_RLDS)/.installed: $(LEROBOT)/.installed tests/convert/tfds-requirements.txt
	rm -rf $(LEROBOT_RLDS)
	$(LEROBOT)/bin/python -m venv $(LEROBOT_RLDS)
	$(LEROBOT)/bin/python -c 'import os, sysconfig; print(os.path.realpath(sysconfig.get_paths()["purelib"]))' > \
	  "$$($(LEROBOT_RLDS)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/lerobot-venv.pth"
	$(LEROBOT)/bin/python -m pip freeze --exclude-editable | grep -v -e ' @ ' -e '^h5py==' > $(LEROBOT_RLDS)/constraints.txt
	$(LEROBOT_RLDS)/bin/python -m pip install -q -c $(LEROBOT_RLDS)/constraints.txt -r tests/convert/tfds-requirements.txt
	touch $@

bench-rlds-peer: venv $(LEROBOT_RLDS)/.installed
	$(PY) tools/bench/convert.py --pairs rlds:lerobot-v3.0 --episodes 200 --steps 20 --size 64

clean:
	rm -rf $(VENV) $(ENERGON6) $(TFDS) $(LEROBOT) $(LEROBOT03) $(LEROBOT_RLDS) $(WIDS_VENV) $(RATARMOUNT_VENV) demo-data .pytest_cache

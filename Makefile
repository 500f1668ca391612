# Two entry points; both create/refresh .venv first (instant when it is up to date).
PY := .venv/bin/python

.PHONY: env demo test
env:
	bash tools/setup_env.sh

demo: env
	bash tools/run_demo.sh

test: env
	$(PY) -m pytest tests

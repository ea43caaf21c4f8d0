#!/usr/bin/env bash
# One command from a fresh clone: virtual environment, torch, the build, then the demo.
#   bash scripts/setup.sh            # set up and run `fxrewrite demo`
#   FXREWRITE_SKIP_DEMO=1 bash scripts/setup.sh   # set up only
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
# Graphviz's dot draws the regions of `fxrewrite explain --html` (and its tests).
if ! command -v dot >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends graphviz
    else
        echo "setup: Graphviz's dot not found; install it (apt-get install graphviz) for explain --html" >&2
    fi
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# torch first: it is the large download; the dev extras are the test tools.
python -m pip install --quiet "torch>=2.8" "maturin>=1.7,<2"
python -m pip install --quiet -e ".[dev]"
maturin develop --release --quiet
if [ -z "${FXREWRITE_SKIP_DEMO:-}" ]; then
    fxrewrite demo
fi

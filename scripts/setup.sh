#!/usr/bin/env bash
# One command from a fresh clone: virtual environment, torch, the build, then the demo.
#   bash scripts/setup.sh            # set up and run `fxrewrite demo`
#   FXREWRITE_SKIP_DEMO=1 bash scripts/setup.sh   # set up only
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
bash scripts/install_browser.sh >/dev/null
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# torch first: it is the large download; the dev extras are the test tools.
python -m pip install --quiet "torch>=2.13" "maturin>=1.7,<2"
python -m pip install --quiet -e ".[dev]"
# A version-specific module of an older build (_core.cpython-3XX-*.so) would be imported
# instead of the abi3 one maturin writes (_core.abi3.so): remove it first.
rm -f python/fxrewrite/_core.*.so
maturin develop --release --quiet
if [ -z "${FXREWRITE_SKIP_DEMO:-}" ]; then
    fxrewrite demo
fi

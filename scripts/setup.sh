#!/usr/bin/env bash
# One command from a fresh clone: virtual environment, torch, the build, then the demo.
#   bash scripts/setup.sh            # set up and run `fxrewrite demo`
#   FXREWRITE_SKIP_DEMO=1 bash scripts/setup.sh   # set up only
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
bash scripts/install_browser.sh >/dev/null
if [ ! -x .venv/bin/python ]; then
    # torch from PyPI is the CUDA build: about 6 GiB installed (torch, nvidia-*, triton), and
    # the build and test tools about 3 GiB more. Say so up front: pip's own message is only
    # "[Errno 28] No space left on device", late in the install.
    free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
    if [ "${free_kib:-0}" -lt $((10 * 1024 * 1024)) ]; then
        echo "warning: $((free_kib / 1024)) MiB free here; a fresh setup needs about 10 GiB" >&2
    fi
    "$PY" -m venv .venv
fi
. .venv/bin/activate
# No pip cache: it would keep a second copy of every downloaded wheel (about 4 GiB for torch's),
# which a one-time install never reads again. FXREWRITE_PIP_CACHE=1 keeps it (pip disables its
# cache for any value of PIP_NO_CACHE_DIR, "0" included).
if [ -z "${FXREWRITE_PIP_CACHE:-}" ]; then
    export PIP_NO_CACHE_DIR=1
fi
python -m pip install --quiet --upgrade pip
# torch first: it is the large download; the dev extras are the test tools.
python -m pip install --quiet "torch>=2.10" "maturin>=1.7,<2"
python -m pip install --quiet -e ".[dev]"
# SGLang's plugin loader, for tests/test_sglang_plugin.py, without SGLang's dependencies: they pin
# torch==2.14.1 and pull its CUDA kernels (gigabytes), and the loader's import needs only small
# ones (the dev extras above, and IPython and traitlets here: sglang imports IPython.display,
# which needs traitlets; IPython's own dependencies are its interactive shell's).
python -m pip install --quiet --no-deps "sglang==0.5.23" "ipython==9.19.1" "traitlets==5.16.1"
# A version-specific module of an older build (_core.cpython-3XX-*.so) would be imported
# instead of the abi3 one maturin writes (_core.abi3.so): remove it first.
rm -f python/fxrewrite/_core.*.so
maturin develop --release --quiet
if [ -z "${FXREWRITE_SKIP_DEMO:-}" ]; then
    fxrewrite demo
fi

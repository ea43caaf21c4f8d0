#!/usr/bin/env bash
# The whole test suite: lint, cargo tests, the stub check, pytest.
#   bash scripts/test.sh
# Needs the environment of scripts/setup.sh (it sets it up when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
# As in scripts/setup.sh: the wheel checks' build environments need no second copy in pip's cache.
if [ -z "${FXREWRITE_PIP_CACHE:-}" ]; then
    export PIP_NO_CACHE_DIR=1
fi
if [ ! -x .venv/bin/python ]; then
    FXREWRITE_SKIP_DEMO=1 bash scripts/setup.sh
fi
. .venv/bin/activate
# A virtual environment made before a test tool joined the dev extras gets it now.
python -c "import xdist" 2>/dev/null || python -m pip install --quiet -e ".[dev]"
# The HTML view's browser test must run here, never skip: as root (CI) a browser is installed
# and required; elsewhere it is required when one is found.
if [ -n "$(bash scripts/install_browser.sh)" ] || [ "$(id -u)" = 0 ]; then
    export FXREWRITE_REQUIRE_BROWSER=1
fi
# Rebuild the extension so the tests run the current Rust code.
# A version-specific module of an older build (_core.cpython-3XX-*.so) would be imported
# instead of the abi3 one maturin writes (_core.abi3.so): remove it first.
rm -f python/fxrewrite/_core.*.so
maturin develop --release --quiet
echo "== cargo fmt / clippy"
cargo fmt --check
cargo clippy --all-targets --all-features --quiet -- -D warnings
echo "== ruff"
ruff check python tests benches
ruff format --check python tests benches
echo "== mypy (strict, the package)"
python -m mypy python/fxrewrite
echo "== stub check"
python -m mypy.stubtest fxrewrite._core --ignore-missing-stub --allowlist scripts/stubtest-allowlist.txt
echo "== wheel: the release wheel (manylinux_2_28, abi3), the command line tool on every installed Python from 3.10"
bash scripts/check_wheel.sh
echo "== sdist: a wheel built from it by pip (maturin from PyPI), the same checks"
bash scripts/check_wheel.sh --sdist
echo "== cargo test"
cargo test --quiet
echo "== the campaign's slice: the same 6 random programs on every run, both installs and forms"
# Exactly 6 programs judged, however long they take; fewer (or a must-be-0 column not 0) exits 1.
python tests/campaign.py --programs 6 --no-log --first-seed 0 | tail -5
echo "== pytest"
# Exit code 5 (no tests collected) must fail, and it does: set -e. Two workers (pytest-xdist):
# the suite is mostly single-threaded compiles, 7 minutes instead of 13 on a cold 2-core machine;
# FXREWRITE_PYTEST_WORKERS=0 runs it in this one process.
python -m pytest -q -p no:cacheprovider -n "${FXREWRITE_PYTEST_WORKERS:-2}" "$@"

#!/usr/bin/env bash
# The package's slice of the suite on older torch releases than the dev environment's: the
# compile tests (both forms), the command line tool, the torch-compatibility tests and the
# CUDA-graph bench's dry run (tests/test_cuda_graphs_dry_run.py), each against one torch.
#   bash scripts/test_torch_range.sh                 # torch 2.11.0 (the device machines' torch)
#   bash scripts/test_torch_range.sh 2.11.0 2.13.0   # several, one after the other
#   bash scripts/test_torch_range.sh 2.11.0 -- -k dynamic   # extra pytest arguments after --
# One virtual environment per version, target/venv-torch<MAJOR><MINOR> (venv-torch211; PyPI's Linux wheel: a CUDA
# build, about 4.7 GB with its nvidia-* packages, about 85 s to make here; CUDA is not needed to
# run on the CPU), made on the first run and reused after (a stamp of what it holds). The
# package is the release wheel of scripts/build_wheel.sh (abi3, built once for all versions),
# installed into each environment with --no-deps: the command line tests start `python -m
# fxrewrite` with only tests/ on PYTHONPATH. Not part of scripts/test.sh: see docs/versions.md.
set -euo pipefail
case "${1:-}" in
    -h | --help)
        sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
        exit 0
        ;;
esac
VERSIONS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    if [[ ! "$1" =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then
        echo "usage: bash scripts/test_torch_range.sh [VERSION...] [-- PYTEST_ARGS...]   (--help for more)" >&2
        exit 2
    fi
    VERSIONS+=("$1")
    shift
done
[ "${1:-}" = "--" ] && shift
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(2.11.0)
cd "$(dirname "$0")/.."
ROOT="$PWD"
WHEELS="$ROOT/target/range-wheel"
rm -rf "$WHEELS"
WHEEL="$(bash scripts/build_wheel.sh "$WHEELS" 2>/dev/null | tail -n 1)"
# The test dependencies of pyproject.toml's dev extra that the slice imports (hypothesis pinned as there).
SUMMARY=()
FAILED=0
DEPS=("pytest>=8" "pytest-timeout>=2.3" "hypothesis==6.170.27" numpy)
for v in "${VERSIONS[@]}"; do
    mm="${v%.*}" && [[ "$v" =~ ^[0-9]+\.[0-9]+$ ]] && mm="$v"
    VENV="$ROOT/target/venv-torch${mm//./}"
    want="torch==$v ${DEPS[*]}"
    if [ "$(cat "$VENV/stamp" 2>/dev/null)" != "$want" ]; then
        t0=$(date +%s)
        rm -rf "$VENV"
        "${PYTHON:-python3}" -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --upgrade "torch==$v" "${DEPS[@]}"
        echo "$want" >"$VENV/stamp"
        echo "== torch $v: environment made in $(($(date +%s) - t0)) s ($(du -sh "$VENV" | cut -f1))"
    fi
    "$VENV/bin/python" -m pip install -q --no-deps --force-reinstall "$WHEEL"
    echo "== torch $v: $("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
    t0=$(date +%s)
    # From tests/'s parent, but the checkout's python/ is not on sys.path: the wheel is tested.
    # Every version runs even when one fails: the summary says which.
    if "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
        tests/test_compile.py tests/test_cli.py tests/test_torch_compat.py tests/test_cuda_graphs_dry_run.py "$@"; then
        SUMMARY+=("torch $v: passed in $(($(date +%s) - t0)) s")
    else
        SUMMARY+=("torch $v: FAILED after $(($(date +%s) - t0)) s")
        FAILED=1
    fi
done
printf '== %s\n' "${SUMMARY[@]}"
exit "$FAILED"

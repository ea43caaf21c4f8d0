#!/usr/bin/env bash
# The release wheel, linked against glibc 2.28 (manylinux_2_28) without a container: zig is the
# linker and brings the old glibc's symbol versions, so the build machine's newer glibc does not
# leak into the tag (a plain `maturin build` here gives manylinux_2_34). torch's and vLLM's
# Linux wheels are manylinux_2_28: ours must install wherever theirs do.
#   bash scripts/build_wheel.sh            # writes dist/fxrewrite-*-cp310-abi3-manylinux_2_28_x86_64.whl
#   bash scripts/build_wheel.sh OUT_DIR    # writes the wheel into OUT_DIR instead
#   bash scripts/build_wheel.sh --sdist [OUT_DIR]   # the source distribution (.tar.gz) instead
# Prints the path of what it built as the last line of stdout; maturin's log goes to stderr.
# maturin, zig (PyPI's ziglang) and auditwheel come from a build environment of their own,
# target/wheel-build-venv, made on the first run (from PyPI) and reused after; no other
# environment is needed or touched. PYTHON picks the interpreter that makes it (python3).
set -euo pipefail
SDIST=""
case "${1:-}" in
    -h | --help)
        sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
        exit 0
        ;;
    --sdist) SDIST=1 && shift ;;
esac
if [ $# -gt 1 ] || [[ "${1:-}" == -* ]]; then
    echo "usage: bash scripts/build_wheel.sh [--sdist] [OUT_DIR]   (--help for more)" >&2
    exit 2
fi
# OUT_DIR is relative to the caller's directory, not to the checkout.
mkdir -p "${1:-$(dirname "$0")/../dist}"
OUT="$(cd "${1:-$(dirname "$0")/../dist}" && pwd)"
cd "$(dirname "$0")/.."
ROOT="$PWD"
VENV="$ROOT/target/wheel-build-venv"
# The versions the build environment holds; changing this line remakes its packages.
REQUIREMENTS=("maturin>=1.7,<2" "ziglang>=0.17,<0.18" "auditwheel>=6.1,<7")

if [ ! -x "$VENV/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$VENV"
fi
# A stamp of the requirements: a rerun with the same ones starts no pip at all.
if [ "$(cat "$VENV/requirements.stamp" 2>/dev/null)" != "${REQUIREMENTS[*]}" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade "${REQUIREMENTS[@]}" >&2
    echo "${REQUIREMENTS[*]}" >"$VENV/requirements.stamp"
fi

# maturin finds zig as `python -m ziglang` through the first python on PATH: the build venv's.
export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
unset CONDA_PREFIX
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
if [ -n "$SDIST" ]; then
    what="source distribution" suffix=".tar.gz"
    cmd=(maturin sdist --out "$OUT")
else
    what="wheel" suffix=".whl"
    cmd=(maturin build --release --zig --compatibility manylinux_2_28 --out "$OUT")
fi
if ! "${cmd[@]}" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "error: ${cmd[*]} failed" >&2
    exit 1
fi
cat "$LOG" >&2
# What this run wrote (OUT_DIR may hold older ones): maturin's "Built <what> ... to PATH" line.
BUILT="$(grep -o "Built $what.* to .*$suffix" "$LOG" | sed 's/.* to //' | tail -n 1)"
if [ -z "$BUILT" ] || [ ! -f "$BUILT" ]; then
    echo "error: no 'Built $what ... to PATH' line in maturin's output" >&2
    exit 1
fi
echo "$BUILT"

#!/usr/bin/env bash
# The GPU check, prepared here for a device machine (no network, no Rust, its own python3 and
# torch): builds the release wheel (scripts/build_wheel.sh) into .whl/ (ignored by git, so the
# device call carries it), then tries here everything up to where a GPU is needed: the wheel
# installs with `pip install --no-index --no-deps --target` into a fresh folder, and from a
# directory outside the checkout, with only that folder on PYTHONPATH (not the checkout's
# python/), `benches/cuda_graphs.py --dry-run` passes. Last, it prints the device call: the
# command, what to carry and the timeout.
#   bash scripts/device_check.sh                     # the dry run with .venv/bin/python
#   bash scripts/device_check.sh --python PY         # with another interpreter (another torch)
#   bash scripts/device_check.sh --no-dry-run        # build and install only
# The device runs `benches/cuda_graphs.py` (under 5 minutes by construction; see its --help)
# against its own torch and writes $OUT/cuda_graphs.json; the table is in the call's output.
set -euo pipefail
PY=""
DRY=1
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help)
            sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
            exit 0
            ;;
        --python)
            PY="${2:?--python needs an interpreter}"
            shift 2
            ;;
        --no-dry-run) DRY="" && shift ;;
        *)
            echo "usage: bash scripts/device_check.sh [--python PY] [--no-dry-run]   (--help for more)" >&2
            exit 2
            ;;
    esac
done
# An interpreter given by a relative path is the caller's; the dry run changes directory.
if [[ "$PY" == */* ]]; then
    PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
fi
cd "$(dirname "$0")/.."
ROOT="$PWD"
if [ -z "$PY" ]; then
    PY="$ROOT/.venv/bin/python"
    [ -x "$PY" ] || PY=python3
fi
# `.whl/*.whl` on the device must match one wheel: pip refuses two versions of one package.
rm -f .whl/*.whl
WHEEL="$(bash scripts/build_wheel.sh .whl | tail -n 1)"
echo "== built $WHEEL ($(du -h "$WHEEL" | cut -f1))"
if ! git check-ignore -q .whl/; then
    echo "error: .whl/ is not ignored by git: the device would get it twice (tree and carry)" >&2
    exit 1
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$TMP/site" "$WHEEL"
echo "== installed with --no-index --no-deps --target into a fresh folder"
# From outside the checkout, so neither its python/ nor a .pth of an editable install can win.
(
    cd "$TMP"
    PYTHONPATH="$TMP/site" "$PY" -c '
import sys, fxrewrite, fxrewrite._core
assert fxrewrite.__file__.startswith(sys.argv[1]), f"fxrewrite imported from {fxrewrite.__file__}"
print(f"   fxrewrite {fxrewrite.__version__} from {fxrewrite.__file__}")
' "$TMP/site/"
)
if [ -n "$DRY" ]; then
    echo "== dry run from $TMP with PYTHONPATH=$TMP/site, $("$PY" -c 'import torch; print("torch", torch.__version__)')"
    (cd "$TMP" && PYTHONPATH="$TMP/site" "$PY" "$ROOT/benches/cuda_graphs.py" --dry-run --out "$TMP/dry.json")
fi

# What travels: the working tree (tracked and untracked files git does not ignore) and .whl.
BYTES="$( (git ls-files -co --exclude-standard -z && printf '%s\0' .whl/*.whl) | du -cb --files0-from=- | tail -n 1 | cut -f1)"
echo "== ready; the device call carries $((BYTES / 1024)) KiB (limit 64 MiB). Give the device tool's run:"
echo "   carry: [\".whl\"]   timeout_s: 420"
# Quoted so that $OUT is expanded there, not here.
echo '   command: python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fxr .whl/*.whl && PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/fxr python3 benches/cuda_graphs.py --out $OUT/cuda_graphs.json'

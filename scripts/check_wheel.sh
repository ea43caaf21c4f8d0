#!/usr/bin/env bash
# The install story, tried: build the wheel once, check that its tag is abi3, install it with
# --no-deps into a small virtual environment per supported Python and run the command line tool
# there on the committed fixtures (inspect, check, explain --json). Those environments have no
# torch: on .fxir files the tool must not need it.
#   bash scripts/check_wheel.sh            # scripts/test.sh calls it
#   FXREWRITE_WHEEL_PYTHONS="3.10 3.13" bash scripts/check_wheel.sh
# A version that is not installed is skipped with a "skipped:" line; any other failure fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
# maturin and the pip that installs into the bare venvs come from the environment of setup.sh.
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python ]; then
    . .venv/bin/activate
fi
FIXTURES=("$ROOT/tests/data/cli_model_v2.fxir" "$ROOT/tests/data/cli_model_v1.fxir")
OUT="$ROOT/target/wheel-check"
VERSIONS="${FXREWRITE_WHEEL_PYTHONS:-3.10 3.11 3.12 3.13}"
PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}"
v=""
trap 'echo "error: wheel check failed${v:+ on python$v}" >&2' ERR

# The interpreter for version $1, or nothing. pyenv's shims exist for versions that are not
# selected and then fail, so every candidate must run and report the right version.
find_python() {
    local want="$1" c
    for c in "$PYENV_ROOT"/versions/"$want".*/bin/python"$want" "$(command -v "python$want" || true)"; do
        if [ -n "$c" ] && [ -x "$c" ] &&
            [ "$("$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; then
            echo "$c"
            return
        fi
    done
}

# Fails, showing the output, unless $2 matches the regular expression $1.
expect() {
    grep -q -- "$1" <<<"$2" || { printf 'expected /%s/ in:\n%s\n' "$1" "$2" >&2; return 1; }
}

# Runs the installed tool in venv $1 (outside the checkout, so python/ cannot shadow the
# installed package, and without PYTHONPATH). Every command must succeed (set -e).
smoke() {
    local venv="$1" bin="$1/bin" f out
    cd "$venv"
    unset PYTHONPATH
    "$bin/python" - "$venv" <<'EOF'
import importlib.util, sys
import fxrewrite._core as core
assert importlib.util.find_spec("torch") is None, "torch is importable in the wheel check venv"
assert core.__file__.startswith(sys.argv[1]) and core.__file__.endswith(".abi3.so"), core.__file__
EOF
    out="$("$bin/fxrewrite" inspect "${FIXTURES[@]}")"
    expect "fxr_cli::add_rms_.default *v2" "$out"
    expect "fxr_cli::add_rms_.default *v1" "$out"
    "$bin/fxrewrite" check "${FIXTURES[@]}" >/dev/null
    for f in "${FIXTURES[@]}"; do
        out="$("$bin/python" -m fxrewrite explain --json "$f")"
        "$bin/python" -c '
import json, sys
decisions = json.loads(sys.argv[1])
assert len(decisions) == 2 and {d["action"] for d in decisions} == {"reinplaced"}, decisions
' "$out"
    done
}

rm -rf "$OUT"
mkdir -p "$OUT"
# The same features as test.sh's `maturin develop`, so cargo reuses that build: this only packs.
maturin build --release --out "$OUT/dist" >"$OUT/build.log" 2>&1 || { cat "$OUT/build.log" >&2; false; }
WHEELS=("$OUT"/dist/fxrewrite-*.whl)
WHEEL="${WHEELS[0]}"
case "$(basename "$WHEEL")" in
    fxrewrite-*-cp310-abi3-*.whl) echo "wheel: $(basename "$WHEEL")" ;;
    *) echo "error: $(basename "$WHEEL") is not a cp310-abi3 wheel" >&2; exit 1 ;;
esac

for v in $VERSIONS; do
    py="$(find_python "$v")"
    if [ -z "$py" ]; then
        echo "skipped: python$v not installed"
        continue
    fi
    venv="$OUT/py$v"
    "$py" -m venv --without-pip "$venv"
    # The build environment's pip installs into the bare venv: no pip bootstrap per version.
    python -m pip --python "$venv/bin/python" install --quiet --no-deps --no-index "$WHEEL"
    (smoke "$venv")
    echo "ok: python$v ($("$venv/bin/python" -c 'import platform; print(platform.python_version())')): inspect, check, explain --json"
done

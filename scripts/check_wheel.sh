#!/usr/bin/env bash
# The install story, tried. Default: the release wheel of scripts/build_wheel.sh (zig, glibc 2.28).
# It fails unless (a) its file name says cp310-abi3 and manylinux_2_28 or older, (b) `auditwheel
# show` finds it consistent with manylinux_2_28 or older, and (c) no symbol of the extension
# needs a glibc newer than 2.28 (objdump -T: the tag alone could lie). --sdist: the source
# distribution instead, built into a wheel by pip with build isolation (maturin from PyPI, cargo
# with --locked): it must hold all the source and lock file a build from it needs.
# Either wheel is then installed with --no-deps into a small virtual environment per supported
# Python, where the command line tool runs on the committed fixtures (inspect, check, explain
# --json). Those environments have no torch: on .fxir files the tool must not need it. With
# --sdist, `pip install .` of the clone into a fresh venv is also tried as the pass, with the
# torch of the project's .venv.
#   bash scripts/check_wheel.sh            # the release wheel; scripts/test.sh calls it
#   bash scripts/check_wheel.sh --sdist    # the sdist; scripts/test.sh calls it too
#   FXREWRITE_WHEEL_PYTHONS="3.10 3.13" bash scripts/check_wheel.sh
# A version that is not installed is skipped with a "skipped:" line; any other failure fails.
# Needs only python3 and a Rust toolchain: maturin, zig and auditwheel come from the build
# environment of scripts/build_wheel.sh (made from PyPI on its first run), and its pip installs
# into the per-version environments. objdump (Debian binutils) is installed when missing.
set -euo pipefail
MODE=release
case "${1:-}" in
    "") ;;
    --sdist) MODE=sdist ;;
    -h | --help)
        sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
        exit 0
        ;;
    *)
        echo "usage: bash scripts/check_wheel.sh [--sdist]   (--help for more)" >&2
        exit 2
        ;;
esac
cd "$(dirname "$0")/.."
ROOT="$PWD"
# The newest glibc the release wheel may need: torch's and vLLM's wheels are manylinux_2_28.
GLIBC_MAX=28
FIXTURES=("$ROOT/tests/data/cli_model_v2.fxir" "$ROOT/tests/data/cli_model_v1.fxir")
VERSIONS="${FXREWRITE_WHEEL_PYTHONS:-3.10 3.11 3.12 3.13}"
PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}"
BUILD_PY="$ROOT/target/wheel-build-venv/bin/python"
v=""
trap 'echo "error: $MODE wheel check failed${v:+ on python$v}" >&2' ERR

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

# The glibc minor version (2.N) that manylinux platform tag $1 promises, or nothing when $1 is
# not a manylinux tag (linux_x86_64, musllinux_*). The legacy names are PEP 600's aliases.
glibc_of_tag() {
    case "$1" in
        manylinux_2_[0-9]*_*) sed 's/^manylinux_2_\([0-9]*\)_.*/\1/' <<<"$1" ;;
        manylinux2014_*) echo 17 ;;
        manylinux2010_*) echo 12 ;;
        manylinux1_*) echo 5 ;;
    esac
}

# Fails unless wheel $1 holds the package's Python files, stubs and the abi3 extension.
check_contents() {
    "$BUILD_PY" - "$1" <<'EOF'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = {"fxrewrite/__init__.py", "fxrewrite/cli.py", "fxrewrite/_core.pyi", "fxrewrite/py.typed",
        "fxrewrite/_core.abi3.so"}
assert need <= names, f"missing from the wheel: {sorted(need - names)}"
EOF
}

# (a), (b), (c) of the header on the release wheel $1.
check_glibc() {
    local wheel="$1" name plat p n out tag so
    name="$(basename "$wheel")"
    # (a) The platform part of the name: one tag, or several joined by dots.
    plat="${name%.whl}"
    plat="${plat##*-}"
    IFS=. read -ra plats <<<"$plat"
    for p in "${plats[@]}"; do
        n="$(glibc_of_tag "$p")"
        if [ -z "$n" ] || [ "$n" -gt "$GLIBC_MAX" ]; then
            echo "error: $name: platform tag $p is not manylinux_2_$GLIBC_MAX or older" >&2
            return 1
        fi
    done
    # (b) auditwheel wraps its lines; joined, the verdict reads
    # '... is consistent with the following platform tag: "manylinux_2_28_x86_64".'
    out="$("$ROOT/target/wheel-build-venv/bin/auditwheel" show "$wheel" 2>&1 | tr -s ' \n' '  ')" ||
        { echo "error: auditwheel show $name failed: $out" >&2; return 1; }
    tag="$(sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p' <<<"$out")"
    n="$(glibc_of_tag "$tag")"
    if [ -z "$n" ] || [ "$n" -gt "$GLIBC_MAX" ]; then
        echo "error: auditwheel: $name is not consistent with manylinux_2_$GLIBC_MAX:" >&2
        echo "$out" >&2
        return 1
    fi
    echo "auditwheel: $name is consistent with the following platform tag: \"$tag\""
    # (c) Every versioned glibc symbol the extension needs, from the dynamic symbol table.
    so="$OUT/so"
    "$BUILD_PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("fxrewrite/_core.abi3.so", sys.argv[2])' \
        "$wheel" "$so"
    if ! command -v objdump >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends binutils
        else
            echo "error: objdump not found; install binutils (apt-get install binutils)" >&2
            return 1
        fi
    fi
    objdump -T "$so/fxrewrite/_core.abi3.so" >"$OUT/objdump-T.txt"
    # Lines read '0000000000000000  w   DF *UND*  0000000000000000 (GLIBC_2.28) statx': the
    # version may be in parentheses, the symbol is the last field.
    out="$(awk -v max="$GLIBC_MAX" '
        match($0, /GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?/) {
            ver = substr($0, RSTART + 6, RLENGTH - 6); split(ver, part, ".")
            key = part[1] * 1000 + part[2]
            if (key > top) { top = key; topver = ver }
            if (part[1] > 2 || part[2] > max) bad = bad " " $NF "@GLIBC_" ver
        }
        END { if (topver == "") topver = "none"; print topver; print bad }' "$OUT/objdump-T.txt")"
    if [ -n "$(sed -n 2p <<<"$out")" ]; then
        echo "error: _core.abi3.so needs a glibc newer than 2.$GLIBC_MAX:$(sed -n 2p <<<"$out")" >&2
        return 1
    fi
    echo "glibc: _core.abi3.so needs at most GLIBC_$(head -n 1 <<<"$out") (objdump -T)"
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

if [ "$MODE" = release ]; then
    OUT="$ROOT/target/wheel-check"
    rm -rf "$OUT"
    mkdir -p "$OUT"
    WHEEL="$(bash scripts/build_wheel.sh "$OUT/dist" 2>"$OUT/build.log" | tail -n 1)" ||
        { cat "$OUT/build.log" >&2; false; }
else
    OUT="$ROOT/target/sdist-check"
    rm -rf "$OUT"
    mkdir -p "$OUT"
    SDIST="$(bash scripts/build_wheel.sh --sdist "$OUT/sdist" 2>"$OUT/sdist.log" | tail -n 1)" ||
        { cat "$OUT/sdist.log" >&2; false; }
    "$BUILD_PY" - "$SDIST" <<'EOF'
import sys, tarfile
names = {n.split("/", 1)[1] for n in tarfile.open(sys.argv[1]).getnames() if "/" in n}
need = {"PKG-INFO", "pyproject.toml", "Cargo.toml", "Cargo.lock", "README.md", "rust/lib.rs",
        "python/fxrewrite/__init__.py", "python/fxrewrite/_core.pyi", "python/fxrewrite/py.typed"}
assert need <= names, f"missing from the sdist: {sorted(need - names)}"
EOF
    echo "sdist: $(basename "$SDIST")"
    # From the sdist alone: pip unpacks it into a temporary folder and builds it there, with
    # the build backend that its pyproject.toml names installed from PyPI into an isolated
    # environment (PIP_NO_BUILD_ISOLATION from the caller must not turn that off); --locked:
    # cargo must build from the Cargo.lock in the sdist. Only the compiled crates.io
    # dependencies are kept between runs (CARGO_TARGET_DIR), which no file of the sdist can stand
    # in for.
    if ! env -u PIP_NO_BUILD_ISOLATION -u VIRTUAL_ENV MATURIN_PEP517_ARGS="--locked" \
        CARGO_TARGET_DIR="$ROOT/target/sdist-cargo" \
        "$BUILD_PY" -m pip wheel --no-deps --no-cache-dir --wheel-dir "$OUT/dist" "$SDIST" \
        >"$OUT/pip-wheel.log" 2>&1; then
        cat "$OUT/pip-wheel.log" >&2
        echo "error: pip wheel $(basename "$SDIST") failed" >&2
        false
    fi
    WHEELS=("$OUT"/dist/fxrewrite-*.whl)
    WHEEL="${WHEELS[0]}"
fi
case "$(basename "$WHEEL")" in
    fxrewrite-*-cp310-abi3-*.whl) echo "wheel: $(basename "$WHEEL")" ;;
    *) echo "error: $(basename "$WHEEL") is not a cp310-abi3 wheel" >&2; exit 1 ;;
esac
check_contents "$WHEEL"
if [ "$MODE" = release ]; then
    check_glibc "$WHEEL"
fi

for v in $VERSIONS; do
    py="$(find_python "$v")"
    if [ -z "$py" ]; then
        echo "skipped: python$v not installed"
        continue
    fi
    venv="$OUT/py$v"
    "$py" -m venv --without-pip "$venv"
    # The build environment's pip installs into the bare venv: no pip bootstrap per version.
    "$BUILD_PY" -m pip --python "$venv/bin/python" install --quiet --no-deps --no-index "$WHEEL"
    (smoke "$venv")
    echo "ok: python$v ($("$venv/bin/python" -c 'import platform; print(platform.python_version())')): inspect, check, explain --json"
done

# A user's `pip install .` from the clone, literally: pip builds the source tree with maturin
# from PyPI (build isolation; the compiled crates.io dependencies of the sdist build above are
# reused), into a fresh venv whose torch comes from the project's environment by a .pth (no
# second 6 GiB install; that environment's own .pth files, its editable fxrewrite among them,
# are not read). The installed package must work as the pass: a program on a mutating custom
# op compiled with `fxrewrite.pass_` gets eager's values and a report.
if [ "$MODE" = sdist ] && [ -x "$ROOT/.venv/bin/python" ]; then
    v=""
    venv="$OUT/with-torch"
    "$ROOT/.venv/bin/python" -m venv --without-pip "$venv"
    purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
    "$ROOT/.venv/bin/python" -c "$purelib" >"$("$venv/bin/python" -c "$purelib")/project-torch.pth"
    if ! env -u PIP_NO_BUILD_ISOLATION -u VIRTUAL_ENV MATURIN_PEP517_ARGS="--locked" \
        CARGO_TARGET_DIR="$ROOT/target/sdist-cargo" \
        "$BUILD_PY" -m pip --python "$venv/bin/python" install --no-deps --no-cache-dir "$ROOT" \
        >"$OUT/pip-install-dot.log" 2>&1; then
        cat "$OUT/pip-install-dot.log" >&2
        echo "error: pip install . failed" >&2
        false
    fi
    (
        cd "$venv"
        unset PYTHONPATH
        "$venv/bin/python" - "$venv" <<'EOF'
import sys

import torch

import fxrewrite

assert fxrewrite.__file__.startswith(sys.argv[1]), fxrewrite.__file__


@torch.library.custom_op("wheelcheck::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, s: float) -> None:
    x.mul_(s)


def f(a: torch.Tensor) -> torch.Tensor:
    t = a + 1
    scale_(t, 2.0)
    return t


torch._inductor.config.post_grad_custom_post_pass = fxrewrite.pass_
torch._inductor.config.fx_graph_cache = False
a = torch.arange(6.0)
assert torch.equal(torch.compile(f)(a), f(a))
report = fxrewrite.last_report()
assert report is not None and report.reinplaced == 1, report
EOF
    )
    echo "ok: pip install . into a fresh venv (the project's torch): fxrewrite.pass_ rewrote a compile"
fi

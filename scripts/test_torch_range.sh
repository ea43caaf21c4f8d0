#!/usr/bin/env bash
# The package's slice of the suite on older torch releases than the dev environment's: the
# compile tests (both forms), the command line tool, the torch-compatibility tests and the
# CUDA-graph bench's dry run (tests/test_cuda_graphs_dry_run.py), each against one torch.
#   bash scripts/test_torch_range.sh                 # torch 2.11.0 (the device machines' torch)
#   bash scripts/test_torch_range.sh 2.11.0 2.13.0   # several, one after the other
#   bash scripts/test_torch_range.sh 2.11.0 -- -k dynamic   # extra pytest arguments after --
#   bash scripts/test_torch_range.sh --share-cuda --with-vllm 0.34.0 --compile-only 2.14.0 -- -n 2   # scripts/test.sh's
# One virtual environment per version, target/venv-torch<MAJOR><MINOR> (venv-torch211; PyPI's Linux wheel: a CUDA
# build, about 4.7 GB with its nvidia-* packages, about 85 s to make here; CUDA is not needed to
# run on the CPU), made on the first run and reused after (a stamp of what it holds). The
# package is the release wheel of scripts/build_wheel.sh (abi3, built once for all versions),
# installed into each environment with --no-deps: the command line tests start `python -m
# fxrewrite` with only tests/ on PYTHONPATH. scripts/test.sh runs the last example above (see
# docs/versions.md); other versions are run by hand.
#
# --share-cuda: the environment borrows .venv's CUDA libraries (scripts/shared_cuda_env.py:
#   torch without its nvidia-* packages and triton, the libraries .venv lacks added, .venv's
#   found through LD_LIBRARY_PATH): about 1.6 GB instead of 4.7, for a torch whose CUDA major
#   is .venv's (2.14 and 2.15 are both CUDA 13). Needs .venv (scripts/setup.sh).
# --with-vllm VERSION: vLLM VERSION in the environment too, without its dependencies (they pin
#   torch and pull CUDA kernels) but with the packages its pass modules import, pinned below;
#   its compiled kernels are removed (CUDA builds: nothing on a CPU loads them). The slice then
#   also runs tests/test_vllm_real.py, with FXREWRITE_REQUIRE_VLLM=1: it fails, never skips.
# --compile-only: the compile, torch-compatibility and warm-cache tests only (with --with-vllm,
#   the vLLM ones too), not the command line tool's or the dry run's: what scripts/test.sh runs
#   on 2.14, where CI's 20 minutes leave room for about two minutes.
# --make-only: make (or keep) the environments and stop; scripts/test.sh makes its one in the
#   background while the Rust checks run, then runs the slice.
set -euo pipefail
SHARE_CUDA=""
VLLM=""
MAKE_ONLY=""
COMPILE_ONLY=""
VERSIONS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in
        -h | --help)
            sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
            exit 0
            ;;
        --share-cuda) SHARE_CUDA=1 ;;
        --make-only) MAKE_ONLY=1 ;;
        --compile-only) COMPILE_ONLY=1 ;;
        --with-vllm)
            VLLM="${2:-}"
            shift
            ;;
        *)
            if [[ ! "$1" =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then
                echo "usage: bash scripts/test_torch_range.sh [--share-cuda] [--with-vllm VERSION] [--compile-only] [--make-only] [VERSION...] [-- PYTEST_ARGS...]   (--help for more)" >&2
                exit 2
            fi
            VERSIONS+=("$1")
            ;;
    esac
    shift
done
[ "${1:-}" = "--" ] && shift
if [ -n "$VLLM" ] && [[ ! "$VLLM" =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then
    echo "--with-vllm needs a version (0.34.0), not '$VLLM'" >&2
    exit 2
fi
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(2.11.0)
cd "$(dirname "$0")/.."
ROOT="$PWD"
if [ -n "$SHARE_CUDA" ] && [ ! -x "$ROOT/.venv/bin/python" ]; then
    echo "--share-cuda borrows .venv's CUDA libraries: make .venv first (bash scripts/setup.sh)" >&2
    exit 2
fi
if [ -z "$MAKE_ONLY" ]; then
    WHEELS="$ROOT/target/range-wheel"
    rm -rf "$WHEELS"
    WHEEL="$(bash scripts/build_wheel.sh "$WHEELS" 2>/dev/null | tail -n 1)"
fi
# The test dependencies of pyproject.toml's dev extra that the slice imports (hypothesis pinned as there).
DEPS=("pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.5" "hypothesis==6.170.27" numpy)
# What vLLM's pass modules (vllm.compilation.passes: inductor_pass, pass_manager,
# ir.clone_elimination, and vllm.config under them) import, found by importing them in an
# environment with vLLM alone; installed with --no-deps, as vLLM is.
VLLM_IMPORTS=(aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-types==0.8.0
    apache-tvm-ffi==0.1.15.post2 attrs==26.1.0 cachetools==8.0.3 cbor2==6.3.0 certifi==2026.10.19.post1
    charset-normalizer==3.5.3 cloudpickle==3.1.3 frozenlist==1.8.0 h11==0.16.0 httpcore2==2.17.0
    httpx2==2.17.0 huggingface_hub==2.5.0 idna==3.21 llguidance==1.9.1 msgspec==0.23.0 multidict==7.2.1
    pillow==13.0.0 prometheus_client==0.26.0 propcache==0.5.4 psutil==7.2.2 py-cpuinfo==9.0.0
    pybase64==1.5.1 pydantic==2.14.4 pydantic_core==2.50.5 PyYAML==6.0.4 pyzmq==27.3.0
    regex==2026.12.2 requests==2.34.2 safetensors==0.8.0 tokenizers==0.23.3 tqdm==4.70.1
    transformers==5.25.0 truststore==0.10.5 typing-inspection==0.4.5 urllib3==2.8.0 uvloop==0.23.0
    xgrammar==0.2.9 yarl==1.25.1)
TESTS=(tests/test_compile.py tests/test_cli.py tests/test_torch_compat.py tests/test_cuda_graphs_dry_run.py)
# The warm-cache tests too: a serving engine's second start is served by Inductor's FX graph
# cache, on the torch it pins.
[ -z "$COMPILE_ONLY" ] || TESTS=(tests/test_compile.py tests/test_torch_compat.py tests/test_warm_cache.py tests/test_cache.py)
SUMMARY=()
FAILED=0
for v in "${VERSIONS[@]}"; do
    mm="${v%.*}" && [[ "$v" =~ ^[0-9]+\.[0-9]+$ ]] && mm="$v"
    VENV="$ROOT/target/venv-torch${mm//./}"
    want="torch==$v ${DEPS[*]}${SHARE_CUDA:+ shared-cuda}${VLLM:+ vllm==$VLLM ${VLLM_IMPORTS[*]}}"
    if [ "$(cat "$VENV/stamp" 2>/dev/null)" != "$want" ]; then
        t0=$(date +%s)
        rm -rf "$VENV"
        "${PYTHON:-python3}" -m venv "$VENV"
        if [ -n "$SHARE_CUDA" ]; then
            "$ROOT/.venv/bin/python" scripts/shared_cuda_env.py "$VENV" "$v" "${DEPS[@]}"
        else
            "$VENV/bin/python" -m pip install -q --upgrade "torch==$v" "${DEPS[@]}"
        fi
        if [ -n "$VLLM" ]; then
            "$VENV/bin/python" -m pip install -q --no-deps --no-compile "vllm==$VLLM" "${VLLM_IMPORTS[@]}"
            site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
            find "$site/vllm" -name '*.so' -delete
            rm -rf "$site/vllm/vllm-rs"
        fi
        echo "$want" >"$VENV/stamp"
        echo "== torch $v: environment made in $(($(date +%s) - t0)) s ($(du -sh "$VENV" | cut -f1))"
    fi
    [ -z "$MAKE_ONLY" ] || continue
    "$VENV/bin/python" -m pip install -q --no-deps --force-reinstall "$WHEEL"
    # The borrowed CUDA libraries, for the loader (scripts/shared_cuda_env.py wrote where they are).
    run=("$VENV/bin/python")
    if [ -f "$VENV/cuda-library-path" ]; then
        run=(env "LD_LIBRARY_PATH=$(cat "$VENV/cuda-library-path")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$VENV/bin/python")
    fi
    tests=("${TESTS[@]}")
    if [ -n "$VLLM" ]; then
        tests+=(tests/test_vllm_real.py)
        export FXREWRITE_REQUIRE_VLLM=1
    fi
    echo "== torch $v: $("${run[@]}" -c 'import torch; print(torch.__version__)')${VLLM:+, vLLM $VLLM}"
    t0=$(date +%s)
    # From tests/'s parent, but the checkout's python/ is not on sys.path: the wheel is tested.
    # Every version runs even when one fails: the summary says which.
    if "${run[@]}" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"; then
        SUMMARY+=("torch $v: passed in $(($(date +%s) - t0)) s")
    else
        SUMMARY+=("torch $v: FAILED after $(($(date +%s) - t0)) s")
        FAILED=1
    fi
done
[ -z "$MAKE_ONLY" ] || exit 0
printf '== %s\n' "${SUMMARY[@]}"
exit "$FAILED"

"""Make a virtual environment for another torch release that borrows the CUDA libraries of
``.venv`` instead of installing its own (about 3 GB of ``nvidia-*`` packages and 1 GB of
triton, neither of which a CPU run uses, but which torch's CUDA build must find to import).

    python scripts/shared_cuda_env.py VENV TORCH_VERSION [PACKAGE...]

Run with ``.venv``'s interpreter (it reads ``.venv``'s installed CUDA toolkit). Steps:

1. ``torch==TORCH_VERSION`` with ``--no-deps``, then its requirements that are not CUDA
   libraries or triton (markers evaluated for VENV's interpreter), then PACKAGE... (the
   test tools), all from PyPI into VENV.
2. The CUDA major version torch asks for (its ``cuda-toolkit==X.Y.Z`` requirement) must be
   ``.venv``'s; otherwise it stops with exit status 3 (make a full environment instead).
3. The libraries torch's own ``.so`` files need and ``.venv`` lacks (torch 2.14 needs
   cuRAND, 2.15 does not) are installed into VENV through the toolkit's extras at the
   version torch pins (``cuda-toolkit[curand]==13.0.3``): a few hundred MB.
4. ``VENV/cuda-library-path`` gets the directories of ``.venv``'s CUDA libraries, for
   ``LD_LIBRARY_PATH``: the dynamic loader searches torch's RPATH (VENV's own ``nvidia/``)
   first, then these. Nothing is linked into VENV and nothing of ``.venv`` is written: a
   symlinked directory would let a later pip install in VENV overwrite ``.venv``'s files.

Prints what it installed and the environment's size; exit status 0 when torch imports.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement

# The cuda-toolkit extra that ships each library torch's .so files may need.
TOOLKIT_EXTRA_OF_LIBRARY = {
    "libcublas": "cublas",
    "libcublasLt": "cublas",
    "libcudart": "cudart",
    "libcufft": "cufft",
    "libcufile": "cufile",
    "libcupti": "cupti",
    "libcurand": "curand",
    "libcusolver": "cusolver",
    "libcusparse": "cusparse",
    "libnvJitLink": "nvjitlink",
    "libnvrtc": "nvrtc",
    "libnvToolsExt": "nvtx",
}
NOT_BORROWED = re.compile(r"^(nvidia-|cuda-|triton)", re.IGNORECASE)


def pip(venv: Path, *args: str) -> None:
    # --no-compile: no bytecode for all of torch up front (about 300 MB); Python writes it for
    # the modules a run imports.
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", *args], check=True
    )


# VENV's site-packages, and what its requirements' markers test (VENV's interpreter may not be
# this one; it has no `packaging` to ask).
_VENV_FACTS = """import json, platform, sys, sysconfig
print(json.dumps({"purelib": sysconfig.get_paths()["purelib"], "markers": {
    "python_version": "%d.%d" % sys.version_info[:2], "platform_system": platform.system(),
    "sys_platform": sys.platform, "platform_machine": platform.machine(), "extra": ""}}))"""


def venv_facts(venv: Path) -> tuple[Path, dict[str, str]]:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", _VENV_FACTS], check=True, capture_output=True, text=True
    )
    facts = json.loads(out.stdout)
    return Path(facts["purelib"]), facts["markers"]


def cuda_library_dirs() -> list[Path]:
    """The directories of this interpreter's (``.venv``'s) CUDA libraries."""
    root = Path(sysconfig.get_paths()["purelib"]) / "nvidia"
    return sorted(p for p in root.glob("*/lib") if p.is_dir())


def missing_libraries(torch_lib: Path, library_path: str) -> set[str]:
    missing: set[str] = set()
    env = {**os.environ, "LD_LIBRARY_PATH": library_path}
    for so in sorted(torch_lib.glob("*.so")):
        out = subprocess.run(["ldd", str(so)], capture_output=True, text=True, env=env).stdout
        missing.update(m.group(1) for m in re.finditer(r"^\s*(\S+) => not found", out, re.MULTILINE))
    # The driver's library comes with a GPU's driver, never from PyPI (none here: CPU runs).
    return {name for name in missing if not name.startswith("libcuda.so")}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    venv, version, tools = Path(argv[0]), argv[1], argv[2:]
    try:
        ours = importlib.metadata.version("cuda-toolkit")
    except importlib.metadata.PackageNotFoundError:
        print(
            f"{sys.prefix} has no CUDA libraries to lend (a CPU build of torch?): "
            "make the environment without --share-cuda",
            file=sys.stderr,
        )
        return 3
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip(venv, "--no-deps", f"torch=={version}")
    site, marker_env = venv_facts(venv)
    (dist,) = importlib.metadata.distributions(name="torch", path=[str(site)])
    pure: list[str] = []
    toolkit: Requirement | None = None
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(marker_env):
            continue
        if req.name == "cuda-toolkit":
            toolkit = req
        elif not NOT_BORROWED.match(req.name):
            pure.append(str(Requirement(f"{req.name}{req.specifier}")))
    pip(venv, *pure, *tools)
    if toolkit is not None:
        pinned = [s.version for s in toolkit.specifier if s.operator == "=="]
        theirs = pinned[0] if pinned else ""
        if theirs.split(".")[0] != ours.split(".")[0]:
            print(
                f"torch {version} wants CUDA {theirs or toolkit.specifier}, .venv has {ours}: "
                "the libraries cannot be shared (make a full environment)",
                file=sys.stderr,
            )
            return 3
    library_path = os.pathsep.join(str(p) for p in cuda_library_dirs())
    missing = missing_libraries(site / "torch" / "lib", library_path)
    extras = sorted({TOOLKIT_EXTRA_OF_LIBRARY.get(name.split(".so")[0], "") for name in missing})
    if "" in extras or (missing and toolkit is None):
        print(
            f"torch {version} needs libraries .venv lacks and no toolkit extra ships: {sorted(missing)}",
            file=sys.stderr,
        )
        return 3
    if extras and toolkit is not None:
        pip(venv, f"cuda-toolkit[{','.join(extras)}]{toolkit.specifier}")
        print(f"installed the CUDA libraries .venv lacks: {', '.join(sorted(missing))}")
    (venv / "cuda-library-path").write_text(library_path + "\n")
    still = missing_libraries(site / "torch" / "lib", library_path)
    if still:
        print(f"still not found: {sorted(still)}", file=sys.stderr)
        return 3
    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        env={**os.environ, "LD_LIBRARY_PATH": library_path},
        capture_output=True,
        text=True,
    )
    if check.returncode != 0:
        print(check.stderr, file=sys.stderr)
        return 1
    print(f"torch {check.stdout.strip()} in {venv}, CUDA libraries borrowed from .venv (CUDA {ours})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

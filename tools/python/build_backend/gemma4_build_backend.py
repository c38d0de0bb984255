"""pip's build backend for gemma4-conform (pyproject.toml, backend-path): scikit-build-core, built
against the torch of the environment the package is installed into, so that `pip install .` never
replaces the user's torch.

The extension module gemma4_conform._core links LibTorch's C++ API, whose ABI holds within one torch
version: the wheel must be built against the torch it will run with. With build isolation (pip's
default) the build runs in a temporary environment that cannot see the target's packages, so this
backend asks the target interpreter itself: sys.executable, which is the target environment's
Python, run with -I (no PYTHONPATH, no user site: pip's isolation does not reach it). Then:

- the target has a torch in the supported range (pyproject.toml, the runtime dependency on torch):
  no torch is installed into the build environment; CMake is given the target torch's Torch_DIR and
  the module is built against it; at install the dependency is already satisfied, so pip keeps it;
- the target has no torch: the build environment gets torch==REFERENCE (pyproject.toml,
  [tool.gemma4-conform] reference-torch, the version the project is tested with) and the module is
  built against that; pip then installs torch from the runtime dependency;
- the target's torch is outside the range: the build stops with one message naming the version
  and the range (building against it is unsupported; building against another would make pip
  replace it).

--no-build-isolation (ci/build.sh) goes the same way: the target is then the building interpreter.
A Torch_DIR given by the caller (-C cmake.define.Torch_DIR=...) is kept. gemma4_conform refuses, on
import, a torch other than the one it was built with, naming both (gemma4_conform/__init__.py).
"""
from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from scikit_build_core import build as _skbuild

if sys.version_info >= (3, 11):
    import tomllib
else:  # scikit-build-core depends on tomli there
    import tomli as tomllib

# The source tree's root: this file is tools/python/build_backend/gemma4_build_backend.py.
ROOT = Path(__file__).resolve().parents[3]

def _probe():
    """(version, package directory) of the torch this interpreter imports, or None. Reads the
    installed distribution's version without importing torch (seconds, and a broken CUDA setup would
    fail the import); a torch without distribution metadata (built from source) is imported."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        from importlib.metadata import version
        v = version("torch")
    except Exception:
        import torch
        v = torch.__version__
    return v, os.path.abspath(list(spec.submodule_search_locations)[0])


def _settings() -> tuple:
    """(the supported range of torch: the runtime dependency's specifier, the reference version)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    torch = [d for d in project["project"]["dependencies"] if d.replace(" ", "").startswith("torch")]
    if len(torch) != 1:
        raise RuntimeError("pyproject.toml: [project] dependencies must name torch once (the supported range)")
    spec = torch[0].replace(" ", "")[len("torch"):]
    return spec, project["tool"]["gemma4-conform"]["reference-torch"]


def target_torch():
    """_probe() in the environment the package is installed into: sys.executable -I (see the
    module's docstring)."""
    code = inspect.getsource(_probe) + "\nr = _probe()\nprint('none' if r is None else f'{r[0]}\\n{r[1]}')\n"
    run = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"gemma4-conform: cannot ask {sys.executable} for its torch: "
                         f"{(run.stderr.strip().splitlines() or ['(no output)'])[-1]}")
    lines = run.stdout.splitlines()
    return None if lines[0] == "none" else (lines[0], lines[1])


def _supported(version: str, spec: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(spec).contains(version, prereleases=True)


def _require_supported(torch) -> None:
    spec, _ = _settings()
    if torch is not None and not _supported(torch[0], spec):
        raise SystemExit(  # one message, no traceback: pip prints it and stops
            f"gemma4-conform supports torch{spec}, and the target environment ({sys.prefix}) has torch "
            f"{torch[0]}: installing would replace it. Install a supported torch first, or build against "
            f"this one at your own risk: pip install --no-build-isolation --no-deps .")


def _with_torch(config_settings):
    """config_settings plus the Torch_DIR of the torch to build against: the target's, else the
    build environment's (the reference torch of get_requires_for_build_wheel)."""
    settings = dict(config_settings or {})
    if "cmake.define.Torch_DIR" in settings:
        return settings
    torch = target_torch()
    _require_supported(torch)
    where = "the target environment"
    if torch is None:
        torch, where = _probe(), "the build environment"  # this process's sys.path: the build environment
        if torch is None:
            raise SystemExit("gemma4-conform: no torch in the target or the build environment")
    torch_dir = Path(torch[1]) / "share" / "cmake" / "Torch"
    print(f"gemma4-conform: building against torch {torch[0]} of {where} ({torch_dir})", file=sys.stderr)
    settings["cmake.define.Torch_DIR"] = str(torch_dir)
    return settings


# --- PEP 517 / 660 hooks: scikit-build-core's, with the torch chosen above ------------------------


def _requires(requires: list, config_settings) -> list:
    """scikit-build-core's build requirements, plus the reference torch where the target has none."""
    torch = target_torch()
    _require_supported(torch)
    if torch is None and "cmake.define.Torch_DIR" not in (config_settings or {}):
        requires.append(f"torch=={_settings()[1]}")
    return requires


def get_requires_for_build_wheel(config_settings=None):
    return _requires(list(_skbuild.get_requires_for_build_wheel(config_settings)), config_settings)


def get_requires_for_build_editable(config_settings=None):
    return _requires(list(_skbuild.get_requires_for_build_editable(config_settings)), config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _skbuild.build_wheel(wheel_directory, _with_torch(config_settings), metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _skbuild.build_editable(wheel_directory, _with_torch(config_settings), metadata_directory)


prepare_metadata_for_build_wheel = _skbuild.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _skbuild.prepare_metadata_for_build_editable
get_requires_for_build_sdist = _skbuild.get_requires_for_build_sdist
build_sdist = _skbuild.build_sdist

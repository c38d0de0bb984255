"""Shared paths for the package's tests; the plugin is loaded by the command line (-p), as a user's
installed package loads it through its entry point."""
import os
import sys
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
# The subjects the tests judge live with the implementations (impl/): our Python backends and model
# controls (impl/python) and the third-party adapters (impl/third_party). Also importable: the
# tests' own helpers (HERE) and golden/generators (transformers_candidate).
SUBJECTS = [SOURCE / "impl/python", SOURCE / "impl/third_party"]
sys.path[:0] = [str(p) for p in [HERE, *SUBJECTS, SOURCE / "golden/generators"]]
# Child processes (python -m gemma4_conform, torchrun's ranks, pytester's pytest) import them too.
os.environ["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in [HERE, *SUBJECTS]),
                                            os.environ.get("PYTHONPATH", "")])


@pytest.fixture
def source_dir() -> Path:
    return SOURCE


@pytest.fixture
def cli() -> str:
    """The gemma4-conform executable of the same build (CTest names it; by hand, build/'s)."""
    return os.environ.get("GEMMA4_CONFORM_CLI", str(SOURCE / "build/bin/gemma4-conform"))

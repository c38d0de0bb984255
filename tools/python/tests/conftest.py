"""Shared paths for the package's tests; the plugin is loaded by the command line (-p), as a user's
installed package loads it through its entry point."""
import os
import sys
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(SOURCE / "golden/generators")]  # python_backends, transformers_candidate
# Child processes (python -m gemma4_conform, pytester's pytest) import python_backends too.
os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])


@pytest.fixture
def source_dir() -> Path:
    return SOURCE


@pytest.fixture
def cli() -> str:
    """The gemma4-conform executable of the same build (CTest names it; by hand, build/'s)."""
    return os.environ.get("GEMMA4_CONFORM_CLI", str(SOURCE / "build/bin/gemma4-conform"))

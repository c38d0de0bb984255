"""ci/gpu/kernel_mutations.txt on the CPU (CTest ci_gpu_results): every mutant's line is well formed
and its sed edit changes the file it names. The GPU's mutations step (ci/gpu/test.sh) reports an
edit that changes nothing only once it runs on the GPU host; a kernel refactored on a machine
without a GPU would otherwise leave its mutant silently stale until then. Also: a mutant that a
step cut short left built is rebuilt before the next build (ci/gpu/common.sh, touch_mutated_sources)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).resolve().parent / "kernel_mutations.txt"
BACKENDS = {"cuda", "cuda-deterministic"}
DTYPES = {"f32", "bf16", "f16"}


def mutants():
    """The mutants as the mutations step reads them: test.sh --list-mutants, its one reader of the file."""
    listing = subprocess.run(["bash", str(ROOT / "ci/gpu/test.sh"), "--list-mutants"], check=True,
                             capture_output=True, text=True, env={**os.environ, "MUTANTS": "."}).stdout
    return [line.split("\t") for line in listing.splitlines()]


def edit_changes(source: Path, edit: str, tmp_path: Path) -> bool:
    """Applies the sed edit to a copy of source, as ci/gpu/test.sh does to the file itself."""
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    subprocess.run(["sed", "-i", edit, str(copy)], check=True)
    return copy.read_bytes() != source.read_bytes()


def test_every_mutant_is_well_formed_and_its_edit_changes_its_file(tmp_path):
    names = []
    for fields in mutants():
        assert len(fields) == 6, f"{MUTANTS.name}: expected NAME|FILE|SED|BACKEND|DTYPE|FILTER: {'|'.join(fields)}"
        name, file, edit, backend, dtype, pattern = fields
        names.append(name)
        assert (ROOT / file).is_file(), f"mutant {name}: no file {file}"
        assert backend in BACKENDS and dtype in DTYPES, f"mutant {name}: backend {backend}, dtype {dtype}"
        re.compile(pattern)
        assert edit_changes(ROOT / file, edit, tmp_path), f"mutant {name}: the edit '{edit}' changes nothing in {file}"
    assert len(names) == len(set(names)), "two mutants share a name"
    lines = [line for line in MUTANTS.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert len(names) == len(lines) >= 10, f"{len(names)} mutants listed of the file's {len(lines)} lines"


def test_an_edit_that_matches_nothing_is_caught(tmp_path):
    # The negative control of the check above: an edit whose pattern is not in the file.
    assert not edit_changes(ROOT / "impl/cuda/qk_norm_rope_staged.cuh", "s/no such text in the kernel/x/", tmp_path)


def touch_mutated_sources(cwd: Path) -> str:
    script = f'source "{ROOT}/ci/gpu/common.sh" && touch_mutated_sources'
    return subprocess.run(["bash", "-c", script], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_a_mutant_left_built_is_rebuilt(tmp_path):
    # What the device's copy of the tree leaves after a mutation step whose rebuild did not run: the
    # restored source older than the mutant's object (ninja would keep the object). The sources the
    # step listed are made newer than it; a source not listed is left alone (the negative control).
    (tmp_path / "build").mkdir()
    listed, other, mutant_object = tmp_path / "kernel.cuh", tmp_path / "other.cuh", tmp_path / "build/kernel.o"
    for path in (listed, other, mutant_object):
        path.write_text(path.name)
    for path, when in ((listed, 1_000_000_000), (other, 1_000_000_000), (mutant_object, 1_100_000_000)):
        os.utime(path, (when, when))  # the copy's sources (2001), older than the mutant's object (2004)
    assert touch_mutated_sources(tmp_path) == ""  # no list: nothing to do
    (tmp_path / "build/mutated-sources.txt").write_text("kernel.cuh\nkernel.cuh\n")
    said = touch_mutated_sources(tmp_path)
    assert "rebuilding what a mutation step left built: kernel.cuh" in said
    assert listed.stat().st_mtime > mutant_object.stat().st_mtime
    assert other.stat().st_mtime == 1_000_000_000

"""ci/gpu/ab.sh --prepare on a throwaway git repository, on the CPU (CTest ci_gpu_results): the base's
versions of the changed files land in .ab-base/, and what an A/B cannot hold (a file added since
the base, no change at all, an unknown revision) is refused with the reason. The GPU side (--bench)
needs a GPU machine; bench/README.md ("A/B of a change") says how it runs there."""
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "ci" / "gpu").mkdir(parents=True)
    for script in ("ab.sh", "common.sh"):
        shutil.copy(HERE / script, repo / "ci" / "gpu" / script)
    (repo / "kernel.cu").write_text("old kernel\n")
    (repo / "notes.md").write_text("notes\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    return repo


def prepare(repo: Path, rev: str = "HEAD"):
    return subprocess.run(["bash", "ci/gpu/ab.sh", "--prepare", rev], cwd=repo, capture_output=True, text=True)


def test_the_base_versions_of_the_changed_files_are_kept(tmp_path):
    repo = repository(tmp_path)
    (repo / "kernel.cu").write_text("new kernel\n")
    proc = prepare(repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (repo / ".ab-base" / "kernel.cu").read_text() == "old kernel\n"
    assert (repo / ".ab-base" / "FILES").read_text() == "kernel.cu\n"
    assert (repo / ".ab-base" / "REV").read_text().strip() == git(repo, "rev-parse", "HEAD").strip()
    assert (repo / "kernel.cu").read_text() == "new kernel\n"  # the working tree is left as it is
    assert not (repo / ".ab-base" / "notes.md").exists()


def test_a_file_added_since_the_base_is_refused_by_name(tmp_path):
    repo = repository(tmp_path)
    (repo / "kernel.cu").write_text("new kernel\n")
    (repo / "tiles.cuh").write_text("new header\n")
    git(repo, "add", "tiles.cuh")
    proc = prepare(repo)
    assert proc.returncode == 1
    assert "tiles.cuh" in proc.stderr and "added, deleted or renamed" in proc.stderr


def test_no_change_and_an_unknown_revision_are_refused(tmp_path):
    repo = repository(tmp_path)
    proc = prepare(repo)
    assert proc.returncode == 1 and "does not differ" in proc.stderr
    proc = prepare(repo, "no-such-rev")
    assert proc.returncode == 2 and "'no-such-rev' is not a revision" in proc.stderr


def test_prepare_tree_keeps_the_base_tree_without_goldens(tmp_path):
    repo = repository(tmp_path)
    (repo / "golden.h5").write_text("tensors\n")
    git(repo, "add", "golden.h5")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "golden")
    (repo / "tiles.cuh").write_text("new header\n")  # added since: --prepare refuses it, --prepare-tree not
    proc = subprocess.run(["bash", "ci/gpu/ab.sh", "--prepare-tree", "HEAD"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listing = subprocess.run(["tar", "tzf", str(repo / ".ab-base" / "tree.tar.gz")], capture_output=True, text=True,
                             check=True).stdout.split()
    assert "kernel.cu" in listing and "ci/gpu/ab.sh" in listing
    assert "golden.h5" not in listing and "tiles.cuh" not in listing  # the base's tree, not the working tree's
    assert (repo / ".ab-base" / "REV").read_text().strip() == git(repo, "rev-parse", "HEAD").strip()
    bad = subprocess.run(["bash", "ci/gpu/ab.sh", "--prepare-tree", "no-such-rev"], cwd=repo, capture_output=True, text=True)
    assert bad.returncode == 2 and "'no-such-rev' is not a revision" in bad.stderr

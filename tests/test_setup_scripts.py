"""The repository's setup: what the two one-command scripts install, and what git ignores."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _installs(tmp_path: Path, script: str, *args: str) -> tuple[str, str, str]:
    """The ``make_venv DIR CONSTRAINTS EXTRAS`` call that ``script`` makes (run with a recording stub)."""
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(REPO / "scripts" / script, tmp_path / "scripts" / script)
    log = tmp_path / f"{script}.args"
    # the stub replaces scripts/_venv.sh: it records the arguments and ends the script there
    (tmp_path / "scripts" / "_venv.sh").write_text(f'make_venv() {{ echo "$@" > "{log}"; exit 0; }}\n')
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / script), *args], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and log.exists(), proc.stderr
    venv, constraints, extras = log.read_text().split()
    return venv, constraints, extras


def test_demo_and_test_scripts_install_the_same_environment(tmp_path):
    demo = _installs(tmp_path, "demo.sh")
    test = _installs(tmp_path, "test.sh")
    # make_venv's install stamp is the hash of pyproject.toml and the constraints, plus the extras:
    # the same three arguments mean the second command finds the stamp and does not reinstall
    assert demo == test
    venv, constraints, extras = demo
    assert venv == ".venv" and (REPO / constraints).is_file()
    assert {"dev", "notebook"} <= set(extras.split(","))  # the README's `.venv/bin/jupyter lab` after either
    assert _installs(tmp_path, "notebooks.sh") == demo
    make_lab = re.search(r"make_venv (\S+) (\S+) ([\w,]+)", (REPO / "Makefile").read_text())
    assert make_lab is not None and make_lab.groups() == demo


def test_the_spark_43_line_installs_into_its_own_environment(tmp_path):
    venv, constraints, _ = _installs(tmp_path, "test.sh", "--spark", "4.3")
    assert venv == ".venv-spark43" and constraints == "constraints/spark43.txt"


def _ignored(path: str) -> bool:
    # --no-index: judge the path by .gitignore alone, tracked or not
    proc = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO)
    assert proc.returncode in (0, 1), f"git check-ignore failed for {path}"
    return proc.returncode == 0


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                    reason="needs git and the repository's checkout")
def test_git_ignores_bench_output_but_not_the_bench_package():
    assert _ignored("bench/mine/results.parquet")  # the README's `--out bench/mine`
    assert not _ignored("lmstream_kit/bench/run.py")
    assert not _ignored("lmstream_kit/bench/__init__.py")

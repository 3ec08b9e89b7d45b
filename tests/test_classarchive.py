"""The driver's class-data archive: which options a session gets, the archive's key, the CLI, and a
real driver that maps Spark's classes from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lmstream_kit.engine import classarchive as ca
from lmstream_kit.engine.session import driver_java_options

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTREAM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LMSTREAM_CLASS_ARCHIVE", raising=False)
    monkeypatch.delenv("LMSTREAM_DRIVER_JAVA_OPTIONS", raising=False)  # the suite's own, set in conftest
    return tmp_path / "cache"


def fake_archive_file(path: Path) -> Path:
    """A non-empty file where the archive goes: enough for the option logic, which only looks for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * 16)
    return path


def test_no_archive_no_options(cache):
    assert ca.archive_path().parent == cache / "jvm" and ca.archive_path().name.startswith("driver-")
    assert ca.archive_options() == []
    assert "SharedArchiveFile" not in driver_java_options()


def test_a_built_archive_is_mapped_quietly_before_the_callers_options(cache):
    path = fake_archive_file(ca.archive_path())
    assert ca.archive_options() == [f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    options = driver_java_options("-Xmx2g").split()
    assert options[-4:] == [f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off", "-Xmx2g"]
    assert options[:2] == ["-Xss16m", "-XX:+UseParallelGC"]


@pytest.mark.parametrize("extra", ["-Xshare:off", "-XX:SharedArchiveFile=/elsewhere.jsa",
                                   "-XX:ArchiveClassesAtExit=/tmp/x.jsa"])
def test_the_callers_own_sharing_wins(cache, extra):
    fake_archive_file(ca.archive_path())
    assert ca.archive_options(extra) == []
    assert "-Xlog:cds=off" not in driver_java_options(extra)


@pytest.mark.parametrize("value", ["0", "off", "false"])
def test_its_use_can_be_turned_off(cache, monkeypatch, value):
    fake_archive_file(ca.archive_path())
    monkeypatch.setenv("LMSTREAM_CLASS_ARCHIVE", value)
    assert ca.archive_options() == []


def test_an_empty_file_is_no_archive(cache):
    path = ca.archive_path()
    path.parent.mkdir(parents=True)
    path.touch()
    assert ca.archive_options() == []


def test_the_key_follows_sparks_jars_and_their_place(tmp_path):
    java = sys.executable  # any binary: the key reads its path and the libjvm beside it, if any
    a, b = tmp_path / "a", tmp_path / "b"
    for home in (a, b):
        (home / "jars").mkdir(parents=True)
        (home / "jars" / "spark-core.jar").write_bytes(b"x" * 10)
    # the same jars at another path: the JVM would refuse the other's archive (its class path differs)
    assert ca._key(java, str(a)) != ca._key(java, str(b))
    before = ca._key(java, str(a))
    ca._key.cache_clear()
    assert ca._key(java, str(a)) == before
    (a / "jars" / "spark-sql.jar").write_bytes(b"y")
    ca._key.cache_clear()
    assert ca._key(java, str(a)) != before
    # the same jars installed again (a new venv at the same path): other times, which the JVM checks
    before = ca._key(java, str(a))
    jar = a / "jars" / "spark-core.jar"
    os.utime(jar, (jar.stat().st_atime, jar.stat().st_mtime - 60))
    ca._key.cache_clear()
    assert ca._key(java, str(a)) != before


def test_remove_from_the_cli(cache):
    from lmstream_kit.cli import main

    assert main(["class-archive", "--remove"]) == 0
    path = fake_archive_file(ca.archive_path())
    assert main(["class-archive", "--remove"]) == 0 and not path.exists()


@pytest.mark.spark
def test_a_driver_maps_sparks_classes_from_the_archive(tmp_path):
    """In the default cache, as users and CI build it (``lmstream-kit class-archive`` is a no-op
    where it is built); a driver then loads Spark's classes from its top layer."""
    proc = subprocess.run([sys.executable, "-m", "lmstream_kit", "class-archive"], capture_output=True, text=True,
                          timeout=600, check=False, env={k: v for k, v in os.environ.items()
                                                         if k != "LMSTREAM_CLASS_ARCHIVE"})
    assert proc.returncode == 0 and "class-data archive: " in proc.stdout, proc.stderr[-2000:]
    log = tmp_path / "classes.log"
    script = (
        "from lmstream_kit.engine.session import build_session\n"
        f"spark = build_session(conf={{'spark.driver.extraJavaOptions': '-Xlog:class+load=info:file={log}'}})\n"
        "print(spark.range(10).count())\nspark.stop()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False,
                          env={k: v for k, v in os.environ.items() if k != "LMSTREAM_CLASS_ARCHIVE"})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("10"), proc.stderr[-2000:]
    assert "[cds" not in proc.stdout + proc.stderr  # its messages are off
    # Spark's classes that came from a file: the archive's top layer, or a jar (those the build's
    # stream did not load); the rest are defined at run time (lambdas, generated code)
    spark_lines = [ln for ln in log.read_text().splitlines() if " org.apache.spark." in ln]
    shared = sum("source: shared objects file (top)" in ln for ln in spark_lines)
    from_jars = sum("source: file:" in ln or "source: jar:" in ln for ln in spark_lines)
    assert shared > 1000 and shared > 0.9 * (shared + from_jars), (shared, from_jars)


def test_a_new_build_prunes_the_archives_no_jvm_maps_again_and_keeps_other_installations(cache, tmp_path):
    import json

    jvm = cache / "jvm"
    mine, elsewhere, gone = tmp_path / "venv-a" / "jars", tmp_path / "venv-b" / "jars", tmp_path / "venv-c" / "jars"
    mine.mkdir(parents=True)
    elsewhere.mkdir(parents=True)

    def archive(key, jars):
        path = fake_archive_file(jvm / f"driver-{key}.jsa")
        if jars is not None:
            path.with_suffix(".json").write_text(json.dumps({"jars": str(jars)}))
        return path

    keep = archive("new", mine)
    older_here, other, vanished, unnoted = (archive("old", mine), archive("other", elsewhere),
                                            archive("gone", gone), archive("nonote", None))
    assert sorted(ca.prune_stale(keep=keep)) == sorted([older_here, vanished, unnoted])
    assert keep.is_file() and other.is_file()
    assert {p.name for p in jvm.iterdir()} == {"driver-new.jsa", "driver-new.json", "driver-other.jsa",
                                               "driver-other.json"}

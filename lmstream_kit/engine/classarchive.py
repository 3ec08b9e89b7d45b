"""The driver JVM's class-data archive: Spark's classes mapped from one file at start-up.

A PySpark driver loads some 15,000 classes from Spark's 200-odd jars at every start, and reads,
parses and verifies each of them.  Java's class-data sharing keeps them parsed and verified in an
archive that the next JVM maps instead (``-XX:SharedArchiveFile``).  Measured on the project's
2-core VM (PySpark 4.1.4, Java 17; ``benchmarks/jvm_start.py``), a session started from the
archive was ready in 0.64x the time and used 0.63x the CPU seconds on an idle machine.

An archive belongs to one Java runtime and one Spark installation.  Its file name carries a key of
both (the ``java`` binary and its ``libjvm``, PySpark's version, its jars with their sizes and
times, and their directory), so another JDK, PySpark line or installation builds an archive of its
own.  The place and times matter: the JVM maps an archive only under the class path it was built
with, jars of the same size and time, and a JVM that cannot map one starts the ordinary way,
silently, since the archive's messages are off.

``lmstream-kit class-archive`` builds it (:func:`build_archive`): a driver starts with
``-XX:ArchiveClassesAtExit``, runs a short stream of the kit's so that a streaming query's classes
are loaded too, and exits; the JVM writes the archive on its way out.  ``LMSTREAM_CLASS_ARCHIVE=0``
turns its use off; a caller's own ``-Xshare`` or ``-XX:SharedArchiveFile`` wins over it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

__all__ = ["archive_options", "archive_path", "build_archive", "cache_root", "prune_stale", "remove_archive"]

#: JVM options that silence class-data sharing's own messages (an archive that does not fit this
#: JVM is skipped without a word: the JVM starts the ordinary way)
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
#: a caller's option that names its own sharing: the kit then adds none
CALLER_SHARING = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "SharedClassListFile")


def cache_root() -> Path:
    """``$LMSTREAM_CACHE``, else ``~/.cache/lmstream_kit``: the archives go to its ``jvm/``.  (The
    jars' default, ``jars/``, is below the same home directory; ``$LMSTREAM_JARS`` moves them.)"""
    env = os.environ.get("LMSTREAM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "lmstream_kit"


def _pyspark_home() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("pyspark is not installed")
    return Path(spec.origin).parent


def _jars_dir(pyspark_home: str | Path) -> Path:
    """Spark's jars, the driver's class path: the directory an archive is keyed by and noted with."""
    return (Path(pyspark_home) / "jars").resolve()


@functools.cache
def _key(java: str, pyspark_home: str) -> str:
    """What the archive depends on: the JVM's binaries, and Spark's jars at their place, with their
    sizes and modification times: the JVM maps an archive only under the class path it was built
    with, and checks each jar's size and time, so a copy of the same PySpark elsewhere (another
    venv, a clone at another path) or installed again at the same place needs its own."""
    h = hashlib.sha1()
    real = Path(java).resolve()
    h.update(str(real).encode())
    for lib in sorted(real.parent.parent.glob("lib/server/libjvm.*")):
        st = lib.stat()
        h.update(f"{lib.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    jars = _jars_dir(pyspark_home)
    h.update(str(jars).encode())
    for jar in sorted(jars.glob("*.jar")) if jars.is_dir() else ():
        st = jar.stat()  # the JVM checks each class-path jar's size and modification time
        h.update(f"{jar.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    try:
        from importlib.metadata import version

        h.update(version("pyspark").encode())
    except Exception:  # pragma: no cover - an unpackaged pyspark: its jars stand for it
        pass
    return h.hexdigest()[:16]


def archive_path(java: str | None = None) -> Path:
    """Where this JVM and this PySpark keep (or would keep) their archive."""
    from ..jars import find_java

    return cache_root() / "jvm" / f"driver-{_key(java or find_java(), str(_pyspark_home()))}.jsa"


def archive_options(extra: str | None = None) -> list[str]:
    """The driver's JVM options that map the archive: none where it is not built, its use is off
    (``LMSTREAM_CLASS_ARCHIVE=0``), or the caller's ``extra`` options name sharing of their own."""
    if os.environ.get("LMSTREAM_CLASS_ARCHIVE", "1").strip().lower() in ("0", "off", "false", "no"):
        return []
    if extra and any(word in str(extra) for word in CALLER_SHARING):
        return []
    try:
        path = archive_path()
    except Exception:  # no Java or no PySpark: the session start says so, not this
        return []
    if not path.is_file() or path.stat().st_size == 0:
        return []
    return [f"-XX:SharedArchiveFile={path}", *QUIET]


def remove_archive() -> Path | None:
    """Delete this JVM's and this PySpark's archive; returns its path, or None where there was none."""
    path = archive_path()
    if not path.exists():
        return None
    path.unlink()
    _sidecar(path).unlink(missing_ok=True)
    return path


#: what the child that builds the archive runs: a short stream under the kit's controller, then a
#: clean exit of its JVM (closing the gateway's stdin), which writes the archive
_BUILD = r"""
import sys
from lmstream_kit import LiveStream
from lmstream_kit.engine.session import build_session

spark = build_session(app_name="lmstream_kit-class-archive",
                      conf={"spark.driver.extraJavaOptions": "-XX:ArchiveClassesAtExit=" + sys.argv[1]})
stream = LiveStream("LR2S", policy="lmstream", traffic="random", rate=500, speedup=8, duration_s=600,
                    run_dir=sys.argv[2], spark=spark, output="noop").start()
try:
    stream.wait(batches=4, timeout=240)
finally:
    stream.stop()
proc = spark.sparkContext._gateway.proc
spark.stop()
proc.stdin.close()          # the gateway exits on its stdin's end; the JVM writes the archive then
sys.exit(proc.wait(timeout=300))
"""


def build_archive(*, force: bool = False, say: Callable[[str], None] = print, timeout_s: float = 600) -> Path:
    """Build this JVM's and this PySpark's archive (unless it is there and ``force`` is false).

    A child interpreter runs a short stream with ``-XX:ArchiveClassesAtExit`` into a temporary
    file, which becomes the archive only once its JVM exited cleanly; a failed build leaves no
    archive, and says why in one line (:class:`~lmstream_kit.exceptions.EngineError`).
    """
    import tempfile

    from ..exceptions import EngineError

    path = archive_path()
    if path.is_file() and path.stat().st_size > 0 and not force:
        if not _sidecar(path).is_file():
            _write_note(path)
        say(f"class-data archive: {path} (already built)")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    say("building the driver's class-data archive: a short stream (about a minute) ...")
    env = {k: v for k, v in os.environ.items() if k != "LMSTREAM_DRIVER_JAVA_OPTIONS"}  # the archive's own options only
    env["LMSTREAM_CLASS_ARCHIVE"] = "0"
    with tempfile.TemporaryDirectory(prefix="lmstream-class-archive-") as run_dir:
        try:
            proc = subprocess.run([sys.executable, "-c", _BUILD, str(tmp), str(Path(run_dir) / "run")],
                                  capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
        except subprocess.TimeoutExpired:
            tmp.unlink(missing_ok=True)
            raise EngineError(f"building the class-data archive took over {timeout_s:.0f} s; none was kept") from None
    if proc.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip() and "[cds" not in ln]
        why = lines[-1] if lines else f"exit {proc.returncode}, no archive written"
        raise EngineError(f"building the class-data archive failed: {why}")
    os.replace(tmp, path)
    _write_note(path)
    say(f"class-data archive: {path} ({path.stat().st_size / 2**20:.0f} MiB); the kit's Spark driver starts from it")
    for old in prune_stale(keep=path):
        say(f"removed a stale class-data archive: {old}")
    return path


def _sidecar(path: Path) -> Path:
    """The archive's note: the jars directory it was built from (its class path)."""
    return path.with_suffix(".json")


def _write_note(path: Path) -> None:
    _sidecar(path).write_text(json.dumps({"jars": str(_jars_dir(_pyspark_home())),
                                          "built_at": round(time.time(), 3)}))


def prune_stale(*, keep: Path) -> list[Path]:
    """Delete the archives no JVM will map again, beside ``keep`` (the one just built): those of the
    same jars directory (an earlier PySpark or JDK there), those whose jars directory is gone, and
    those without a note of their directory (built before the key had it, never mapped since).
    Archives of other, existing installations stay.  Returns the paths removed."""
    mine = json.loads(_sidecar(keep).read_text())["jars"] if _sidecar(keep).is_file() else None
    removed = []
    for other in sorted(keep.parent.glob("driver-*.jsa")):
        if other == keep:
            continue
        note = _sidecar(other)
        try:
            jars = json.loads(note.read_text())["jars"] if note.is_file() else None
        except (OSError, ValueError, KeyError, TypeError):
            jars = None
        if jars is None or jars == mine or not Path(jars).is_dir():
            other.unlink(missing_ok=True)
            note.unlink(missing_ok=True)
            removed.append(other)
    return removed

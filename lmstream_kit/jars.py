"""Jars from Maven Central, resolved by Maven with their dependencies into a cache outside git.

Each named set (:data:`JAR_SETS`) is a list of Maven coordinates.  :func:`resolve` writes a small
project file for it, runs ``mvn dependency:copy-dependencies`` once, and keeps the jars under
:func:`cache_dir` (``$LMSTREAM_JARS``, else ``~/.cache/lmstream_kit/jars``) in a directory named by
the set and a hash of its coordinates; later calls return them without Maven.  ``lmstream-kit jars
fetch NAME`` does it from the shell (CI fetches what the tests need that way).

>>> [c.split(":")[1] for c in JAR_SETS["kafka"].coordinates]
['kafka_2.13', 'log4j-slf4j2-impl', 'log4j-core', 'slf4j-api']
>>> JarSet("x", ("org.example:lib",)).key()
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: Maven coordinates are group:artifact:version, got 'org.example:lib'
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from .exceptions import ConfigError, JavaNotFoundError, KitError

__all__ = ["JAR_SETS", "JarSet", "cache_dir", "classpath", "find_java", "jar_set", "resolve", "spark_kafka"]

#: the Kafka release the kit's broker runs (KRaft, no ZooKeeper)
KAFKA_VERSION = "4.3.1"
#: the Log4j 2 release that gives the broker its logging (Kafka 4 logs through SLF4J to Log4j 2)
LOG4J_VERSION = "2.26.1"
#: SLF4J 2, which Log4j's binding needs (Kafka's own dependency is SLF4J 1.7, which finds no provider)
SLF4J_VERSION = "2.0.17"


@dataclass(frozen=True)
class JarSet:
    """A named set of Maven coordinates (``group:artifact:version``), resolved with their dependencies."""

    name: str
    coordinates: tuple[str, ...]
    description: str = ""
    #: where set, only the jars whose file names start with one of these are used (the others, such
    #: as Hadoop's and Scala's, are Spark's own already)
    only: tuple[str, ...] = ()

    def key(self) -> str:
        """The cache directory's name: the set's name and a hash of its coordinates."""
        for c in self.coordinates:
            if len(c.split(":")) != 3 or not all(c.split(":")):
                raise ConfigError(f"Maven coordinates are group:artifact:version, got {c!r}")
        digest = hashlib.sha256("\n".join(self.coordinates).encode()).hexdigest()[:12]
        return f"{self.name}-{digest}"

    def pom(self) -> str:
        """A project file whose dependencies are the set's coordinates."""
        deps = "".join(
            f"<dependency><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId>"
            f"<version>{escape(v)}</version></dependency>"
            for g, a, v in (c.split(":") for c in self.coordinates))
        return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>"
                f"<groupId>lmstream_kit</groupId><artifactId>jars-{escape(self.name)}</artifactId>"
                "<version>0</version><packaging>pom</packaging>"
                f"<dependencies>{deps}</dependencies></project>\n")


#: the jar sets the kit uses, by name
JAR_SETS: dict[str, JarSet] = {
    "kafka": JarSet("kafka", (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
                              f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J_VERSION}",
                              f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
                              f"org.slf4j:slf4j-api:{SLF4J_VERSION}"),
                    f"an Apache Kafka {KAFKA_VERSION} broker (KRaft mode), with Log4j 2 for its logs"),
}


#: the Spark Kafka connector release for each PySpark line that Maven Central serves it for
#: (Spark 4.1.4 and 4.3.0's own are not served there: the nearest release of the same Spark line, or
#: the one before it, whose data source API is the same)
SPARK_KAFKA_CONNECTOR = {"4.0": "4.0.0", "4.1": "4.1.1", "4.2": "4.2.0", "4.3": "4.2.0"}


def spark_kafka(pyspark_version: str | None = None) -> JarSet:
    """The jar set of Spark's Kafka connector (``format("kafka")``) for the installed PySpark
    (or ``pyspark_version``): the connector, its token provider, the Kafka client and commons-pool2.

    >>> spark_kafka("4.1.4").coordinates
    ('org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1',)
    >>> spark_kafka("3.5.1")
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: no Spark Kafka connector for PySpark 3.5.1; the kit knows 4.0, 4.1, 4.2, 4.3
    """
    if pyspark_version is None:
        from importlib.metadata import version

        pyspark_version = version("pyspark")
    line = ".".join(pyspark_version.split(".")[:2])
    if line not in SPARK_KAFKA_CONNECTOR:
        raise ConfigError(f"no Spark Kafka connector for PySpark {pyspark_version}; the kit knows "
                          f"{', '.join(SPARK_KAFKA_CONNECTOR)}")
    release = SPARK_KAFKA_CONNECTOR[line]
    return JarSet(f"spark-kafka-{release}", (f"org.apache.spark:spark-sql-kafka-0-10_2.13:{release}",),
                  f"Spark's Kafka connector {release} (for PySpark {line})",
                  only=("spark-sql-kafka-", "spark-token-provider-kafka-", "kafka-clients-", "commons-pool2-"))


def find_java() -> str:
    """Path of the ``java`` executable that Spark and the Kafka broker use, or raise JavaNotFoundError."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
        raise JavaNotFoundError(
            f"JAVA_HOME={home} has no bin/java; install Java 17 "
            "(e.g. apt-get install openjdk-17-jre-headless) or fix JAVA_HOME"
        )
    found = shutil.which("java")
    if not found:
        raise JavaNotFoundError(
            "Java not found: Spark and the Kafka broker need a Java 17 runtime on PATH or in JAVA_HOME "
            "(e.g. apt-get install openjdk-17-jre-headless)"
        )
    return found


def cache_dir() -> Path:
    """Where resolved jars are kept: ``$LMSTREAM_JARS``, else ``~/.cache/lmstream_kit/jars``."""
    env = os.environ.get("LMSTREAM_JARS")
    return Path(env) if env else Path.home() / ".cache" / "lmstream_kit" / "jars"


def jar_set(name: str | JarSet) -> JarSet:
    """The jar set named ``name`` (``spark-kafka``: the connector for the installed PySpark)."""
    if isinstance(name, JarSet):
        return name
    if name == "spark-kafka":
        return spark_kafka()
    if name not in JAR_SETS:
        raise ConfigError(f"unknown jar set {name!r}; known: {', '.join([*JAR_SETS, 'spark-kafka'])}")
    return JAR_SETS[name]


def _kept(jars: JarSet, paths: list[Path]) -> list[Path]:
    return [p for p in paths if not jars.only or p.name.startswith(jars.only)]


def resolve(name: str | JarSet, *, offline: bool = False) -> list[Path]:
    """The jars of set ``name`` (with their dependencies), resolved by Maven the first time.

    ``offline``: only what is cached already (a KitError naming the fetch command otherwise).
    A missing ``mvn`` or a failed resolution is a KitError of one line.
    """
    jars = jar_set(name)
    dest = cache_dir() / jars.key()
    if (dest / ".complete").is_file():
        return _kept(jars, sorted(dest.glob("*.jar")))
    if offline:
        raise KitError(f"the {jars.name} jars are not fetched yet: run `lmstream-kit jars fetch {jars.name}`")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KitError(f"Maven (mvn) is needed to fetch the {jars.name} jars from Maven Central: "
                       "apt-get install maven")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"jars-{jars.name}-", dir=dest.parent) as tmp:
        (Path(tmp) / "pom.xml").write_text(jars.pom())
        out = Path(tmp) / "jars"
        proc = subprocess.run([mvn, "-B", "-q", "-f", str(Path(tmp) / "pom.xml"),
                               "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
                               f"-DoutputDirectory={out}", "-DincludeScope=runtime"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln] or \
                (proc.stdout + proc.stderr).strip().splitlines()[-1:]
            raise KitError(f"Maven could not fetch the {jars.name} jars: "
                           f"{lines[0].replace('[ERROR]', '').strip() if lines else f'exit {proc.returncode}'}")
        (out / ".complete").write_text("\n".join(jars.coordinates) + "\n")
        if dest.exists():  # another process finished first: keep its copy
            shutil.rmtree(out, ignore_errors=True)
        else:
            os.replace(out, dest)
    return _kept(jars, sorted(dest.glob("*.jar")))


def classpath(name: str | JarSet, *, offline: bool = False) -> str:
    """The jars of set ``name`` as a Java class path."""
    return os.pathsep.join(str(p) for p in resolve(name, offline=offline))

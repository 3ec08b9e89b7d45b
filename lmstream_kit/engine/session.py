"""Starting and stopping SparkSessions for lmstream_kit.

Everything that makes a local or standalone session behave on a small machine
lives here: loopback binding, the Python worker interpreter, a fast checkpoint
file manager, a larger thread stack (a safety net for Spark's stop path), and
quiet logs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Callable, Mapping, Optional, Sequence

from ..exceptions import EngineError, one_line
from ..signals import shielded_children
from ..jars import find_java  # noqa: F401  (here since the engine came first)
from .classarchive import archive_options

#: confs applied to every session the kit creates; callers can override any
DEFAULT_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    # The default checkpoint manager costs ~160 ms per batch on local[2]; the
    # plain file-system one ~50 ms (walCommit and commitOffsets drop ~7x).
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    # Every batch is admitted by the gate; extra no-data batches would blur the
    # one-admission-one-batch accounting (state still expires with the next batch).
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.executor.extraJavaOptions": "-Xss16m",
    # A Python worker (the kit's source runner among them) gives up its socket to the JVM after this
    # time (Spark's default 15 s): on a 2-core VM with both cores busy elsewhere and the stream niced,
    # source runners timed out there.  (The JVM's own wait for a new worker, 10 s, is not a setting.)
    "spark.python.authenticate.socketTimeout": "60s",
}

#: JVM options of the driver, always added in front of the caller's
#: ``spark.driver.extraJavaOptions``: Spark's interruption check can overflow a
#: 1 MB thread stack on stop, and the log configuration keeps start-up quiet.
#: The collector is Java's parallel one: in local mode the driver runs the tasks, and under the
#: serial collector LR1S spent 30% of its processing time collecting, in pauses that made every
#: spike batch (p95 processing 1.17-1.30 s); the parallel one spent 13-18%, p95 0.82-0.89 s
#: (benchmarks/gc_spikes.py, 2-core VM).  A caller's ``-XX:+Use...GC`` replaces it.
DRIVER_COLLECTOR = "-XX:+UseParallelGC"
#: ``-XX:+ExitOnOutOfMemoryError``: a driver out of heap exits at once.  Without it, a capacity probe
#: at 64,000 rows/s (LR1T, asap, 4 GiB heap) lost Spark's DAG scheduler thread to "GC overhead limit
#: exceeded" and the JVM then spent every core collecting, for ever, with the stream and its stop
#: hanging; an exited JVM is seen (``SparkEngine.jvm_exited``), said in one line, and replaced.
DRIVER_JAVA_OPTIONS = ("-Xss16m", DRIVER_COLLECTOR, "-XX:+ExitOnOutOfMemoryError")
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
#: Spark's ``spark.driver.memory`` where none is given
SPARK_DRIVER_MEMORY = "1g"
#: environment variable with JVM options for every driver the kit starts, put before the caller's
#: own: the test suite sets ``-XX:TieredStopAtLevel=1`` there, since its drivers live a minute or
#: two and spend their CPU compiling (a notebook's driver: 39 CPU-s with Java's optimising compiler,
#: 22-26 without, on the 2-core VM); a long-running stream wants the default
DRIVER_OPTIONS_ENV = "LMSTREAM_DRIVER_JAVA_OPTIONS"


def initial_heap_option(memory: str | None) -> str | None:
    """``-Xms`` for a driver of ``spark.driver.memory`` ``memory`` (Spark's units: a plain number is
    MiB, a ``b`` after the unit is allowed), so that its heap starts at its maximum; None where the
    value does not parse.

    A heap that starts small grows by full collections: each time its old generation's committed
    part fills, the parallel collector stops every thread to collect all of it, then grows it.  On
    the 2-core VM, LR1S under lmstream at 2,000 rows/s made 5 full collections a minute that way
    and 1 with the heap fixed; LR1T at 8,000 made 2-3 and none, and 0.7-2.3 s pauses are what put
    most of lmstream's late batches over the bound (benchmarks/gc_spikes.py, gc-spikes-vm-20261128-*).

    >>> initial_heap_option("4g"), initial_heap_option("4096"), initial_heap_option("512mb"), initial_heap_option("x")
    ('-Xms4g', '-Xms4096m', '-Xms512m', None)
    """
    found = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", str(memory or ""), re.IGNORECASE)
    if not found:
        return None
    return f"-Xms{found.group(1)}{found.group(2).lower() or 'm'}"


def driver_java_options(extra: str | None = None, memory: str | None = None) -> str:
    """The driver's JVM options: :data:`DRIVER_JAVA_OPTIONS`, the heap's initial size (``memory``:
    ``spark.driver.memory``, :func:`initial_heap_option`, unless an ``-Xms`` is given), the log
    configuration, the class-data archive's (:func:`~lmstream_kit.engine.classarchive.archive_options`,
    where one is built), ``$LMSTREAM_DRIVER_JAVA_OPTIONS``, then ``extra`` (the caller's
    ``spark.driver.extraJavaOptions``); a collector named in either of the last two replaces
    :data:`DRIVER_COLLECTOR`."""
    options = list(DRIVER_JAVA_OPTIONS)
    from_env = os.environ.get(DRIVER_OPTIONS_ENV, "").strip()
    added = " ".join(o for o in (from_env, str(extra or "").strip()) if o)
    initial = initial_heap_option(memory) if memory is not None and "-Xms" not in added else None
    if initial:
        options.append(initial)
    if LOG4J_CONFIG.exists():
        options.append(f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}")
    if re.search(r"-XX:\+Use\w+GC\b", added):  # the caller's collector, not the kit's
        options.remove(DRIVER_COLLECTOR)
    options.extend(archive_options(added or None))  # Spark's classes from the class-data archive, where built
    if added:
        options.append(added)
    return " ".join(options)


def prepare_environment() -> None:
    """Environment every Spark process inherits: loopback and our interpreter."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must run this interpreter, the one that has pyspark and the kit
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def build_session(
    *,
    master: str = "local[2]",
    app_name: str = "lmstream_kit",
    conf: Optional[Mapping[str, str]] = None,
    log_level: str = "ERROR",
    jars: Sequence[str | os.PathLike] = (),
):
    """Create (or reuse) a SparkSession with the kit's defaults and register the source.

    Parameters
    ----------
    master : str
        ``local[N]`` for embedded Spark or ``spark://host:port`` for a standalone cluster.
    conf : mapping, optional
        Extra Spark confs; they override :data:`DEFAULT_CONF`, except that
        ``spark.driver.extraJavaOptions`` is appended to :data:`DRIVER_JAVA_OPTIONS`.
    jars : paths
        Jars for the driver's and the executors' class path (``spark.jars``, after any given in
        ``conf``): Spark's Kafka connector, say (:func:`lmstream_kit.jars.resolve`).  Like every
        conf, they take effect only where this call starts the JVM.
    """
    find_java()
    prepare_environment()
    from pyspark.sql import SparkSession

    settings = dict(DEFAULT_CONF)
    settings.update(conf or {})
    settings["spark.driver.extraJavaOptions"] = driver_java_options(
        settings.get("spark.driver.extraJavaOptions"), memory=settings.get("spark.driver.memory", SPARK_DRIVER_MEMORY))
    if jars:
        given = [j for j in str(settings.get("spark.jars", "")).split(",") if j]
        settings["spark.jars"] = ",".join([*given, *(str(j) for j in jars)])
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        with shielded_children():  # the JVM ignores SIGTERM/SIGHUP: the kit stops it, in order
            spark = builder.getOrCreate()
    except Exception as exc:  # JVM failed to start, master unreachable, ...
        first = one_line(exc)
        raise EngineError(f"could not start Spark (master {master}): {first}") from exc
    spark.sparkContext.setLogLevel(log_level)
    register_source(spark)
    _quiet_accumulator_server(spark)
    _quiet_exited_jvm_logs()
    return spark


def forget_exited_session(spark) -> None:
    """Drop PySpark's handles on ``spark`` once its JVM has exited, so that the next
    :func:`build_session` starts a new JVM instead of returning the dead session.

    PySpark's own ``stop()`` asks the JVM first and fails where it is gone, leaving the dead
    session, its context and its gateway in place for every later ``getOrCreate``.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    sc = getattr(spark, "_sc", None)
    if sc is not None:
        sc._jsc = None  # nothing to ask of a JVM that is gone
        try:
            sc.stop()  # the accumulator server, and the active context
        except Exception:  # noqa: BLE001 - best effort on a dead session
            pass
    with SparkContext._lock:
        gateway = SparkContext._gateway
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    if gateway is not None:
        try:
            gateway.shutdown()  # its sockets and callback server
        except Exception:  # noqa: BLE001
            pass
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            try:
                proc.wait(timeout=10)  # reap the exited JVM
            except Exception:  # noqa: BLE001
                pass


class ExitedJvmLogFilter(logging.Filter):
    """Drops py4j's tracebacks of a JVM that has exited: each call in flight then logs one
    ("Exception while sending command.", "There was an exception while executing the Python Proxy
    ..."), 20-40 lines apiece, and the kit says it once, in one line (``SparkEngine.jvm_exited``).
    A record goes only when its error is a lost connection (py4j's network error, a plain
    ``Py4JError`` or ``ConnectionError``, never a Java exception) and ``exited()`` says the JVM
    is gone.

    >>> from py4j.protocol import Py4JNetworkError
    >>> def record(exc):
    ...     return logging.LogRecord("py4j.clientserver", logging.ERROR, "", 0, "x", None, (type(exc), exc, None))
    >>> gone = ExitedJvmLogFilter(exited=lambda: True)
    >>> gone.filter(record(Py4JNetworkError("Answer from Java side is empty"))), gone.filter(record(ValueError("x")))
    (False, True)
    >>> ExitedJvmLogFilter(exited=lambda: False).filter(record(Py4JNetworkError("empty")))
    True
    """

    def __init__(self, exited: Callable[[], bool] | None = None) -> None:
        super().__init__()
        self._exited = exited or _active_jvm_exited

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None or not _lost_connection(error):
            return True
        try:
            return not self._exited()
        except Exception:  # noqa: BLE001 - never lose a record to the filter itself
            return True


class InterruptedBatchLogFilter(logging.Filter):
    """Drops py4j's traceback of the batch that the kit interrupts on purpose: a stop that cannot
    wait for the batch in flight (an overloaded stream, :func:`~lmstream_kit.engine.stream.stop_query`)
    interrupts it, and py4j logs the Java ``InterruptedException`` that the batch's function then
    raises, 40 lines of it.  A record goes only while :func:`interrupting` is in force, and only
    where its error is a Java exception (``Py4JJavaError``); Spark runs the batch again on restart.

    >>> from py4j.protocol import Py4JJavaError
    >>> def record(exc):
    ...     return logging.LogRecord("py4j.clientserver", logging.ERROR, "", 0, "x", None, (type(exc), exc, None))
    >>> f = InterruptedBatchLogFilter()
    >>> from types import SimpleNamespace                 # a Java exception's stand-in: its id alone
    >>> java = Py4JJavaError("An error occurred while calling o5797.save.", SimpleNamespace(_target_id="o1"))
    >>> f.filter(record(java))                       # no stop in progress: kept
    True
    >>> with interrupting():
    ...     f.filter(record(java)), f.filter(record(ValueError("x")))
    (False, True)
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not _INTERRUPTING:
            return True
        from py4j.protocol import Py4JJavaError

        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, Py4JJavaError)


#: stops in progress that interrupt a running batch (:func:`interrupting`)
_INTERRUPTING: list = []


@contextlib.contextmanager
def interrupting():
    """While a stop interrupts the batch in flight on purpose: its traceback is not logged
    (:class:`InterruptedBatchLogFilter`)."""
    _quiet_exited_jvm_logs()
    _INTERRUPTING.append(True)
    try:
        yield
    finally:
        _INTERRUPTING.pop()


@contextlib.contextmanager
def jvm_logs_off(query, *, settle_s: float = 10.0):
    """While the kit stops its own ``query``: the driver JVM logs nothing, until the jobs of the
    query's run have ended (at most ``settle_s`` after the stop), and then logs as before.

    A stop that interrupts a batch makes Spark log each killed task, its write's abort and the
    query's own end as errors with stack traces: 600 lines on the terminal for one Ctrl-C of a bench
    at a capacity probe.  The stop is on purpose and the batch runs again on restart.  (The JVM's log
    level is its own: another stream of the same session logs nothing during those seconds either.)
    """
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    try:
        jvm = sc._jvm
        level = str(jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel())
        run_id = str(query.runId)
        sc._jsc.setLogLevel("OFF")
    except Exception:  # noqa: BLE001 - no context, or its JVM is gone: nothing to quiet
        yield
        return
    try:
        yield
    finally:
        try:
            tracker = sc._jsc.statusTracker()
            deadline = time.monotonic() + settle_s
            while time.monotonic() < deadline and any(
                    (info := tracker.getJobInfo(job)) is not None and str(info.status()) == "RUNNING"
                    for job in tracker.getJobIdsForGroup(run_id)):
                time.sleep(0.05)
            sc._jsc.setLogLevel(level)
        except Exception:  # noqa: BLE001 - the JVM went away meanwhile
            pass


def _lost_connection(error: BaseException) -> bool:
    from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

    if isinstance(error, (Py4JNetworkError, ConnectionError)):
        return True
    return isinstance(error, Py4JError) and not isinstance(error, Py4JJavaError)


def process_exited(pid: int) -> bool:
    """Whether process ``pid`` (a JVM the kit started) has exited: gone, or a zombie not yet reaped.
    Asked of the operating system, not of py4j: with the JVM gone, every py4j call fails."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


#: the exit code of a JVM that ran out of heap under ``-XX:+ExitOnOutOfMemoryError``
OUT_OF_HEAP_EXIT = 3
_WHERE_ITS_LOG_IS = "its log is on the terminal or in the run's output"
#: Spark's ``ExecutorExitCode.HEARTBEAT_FAILURE``: an executor gave up reaching the driver
HEARTBEAT_FAILURE_EXIT = 56


def describe_jvm_exit(code: int | None) -> str:
    """What a driver JVM's exit code says, for a one-line reason.

    >>> describe_jvm_exit(3)
    "ran out of memory (exit 3, -XX:+ExitOnOutOfMemoryError; its log is on the terminal or in the run's output)"
    >>> describe_jvm_exit(-9)
    'killed by signal 9'
    >>> describe_jvm_exit(None)
    "killed, or out of memory (its log is on the terminal or in the run's output)"
    """
    if code is None:
        return f"killed, or out of memory ({_WHERE_ITS_LOG_IS})"
    if code == OUT_OF_HEAP_EXIT:
        return f"ran out of memory (exit 3, -XX:+ExitOnOutOfMemoryError; {_WHERE_ITS_LOG_IS})"
    if code == HEARTBEAT_FAILURE_EXIT:
        return ("its executor lost its heartbeat to the driver and Spark exited (exit 56): the driver did not "
                "answer for longer than spark.network.timeout, as in a long garbage collection")
    if code < 0:
        return f"killed by signal {-code}"
    if code > 128:
        return f"killed by signal {code - 128} (exit {code})"
    return f"exit code {code}"


def _gateway_proc(pid: int | None = None):
    """The process handle of PySpark's gateway JVM (the kit's driver), where it has one (and its pid
    is ``pid``, where given); None otherwise."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    return None if proc is None or (pid is not None and proc.pid != pid) else proc


def gateway_exit_code(pid: int, wait_s: float = 10.0) -> int | None:
    """The exit code of the JVM ``pid`` where it is PySpark's gateway process (the kit started it;
    ``spark-class`` execs java, so the handle is the JVM's) and it has exited; None otherwise.
    Reaps it.  A JVM whose main thread is already a zombie may take a moment to be reapable (its
    other threads still go down): up to ``wait_s`` seconds are waited for it then."""
    import subprocess

    proc = _gateway_proc(pid)
    if proc is None:
        return None
    code = proc.poll()
    if code is None and process_exited(pid):
        try:
            code = proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None
    return code


def context_stopped(spark) -> bool:
    """Whether ``spark``'s SparkContext was stopped in its JVM (or the JVM no longer answers)."""
    try:
        return bool(spark.sparkContext._jsc.sc().isStopped())
    except Exception:  # noqa: BLE001 - a gateway that fails to answer has no usable context either
        return True


def kill_jvm(pid: int, timeout: float = 30.0) -> None:
    """Kill the JVM ``pid`` (one the kit started) and wait for it to go."""
    import subprocess

    import psutil

    gateway = _gateway_proc(pid)
    if gateway is not None:  # its own handle kills and reaps it, keeping the code
        gateway.kill()
        try:
            gateway.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        return
    try:
        proc = psutil.Process(pid)
        proc.kill()
        proc.wait(timeout=timeout)
    except (psutil.NoSuchProcess, psutil.TimeoutExpired):  # gone, or a zombie (process_exited counts it)
        pass


def _active_jvm_exited() -> bool:
    """Whether the JVM of PySpark's gateway (the kit's driver) has exited."""
    proc = _gateway_proc()
    return proc is not None and process_exited(proc.pid)


_JVM_LOG_FILTERS = (ExitedJvmLogFilter(), InterruptedBatchLogFilter())


def _quiet_exited_jvm_logs() -> None:
    """Put :class:`ExitedJvmLogFilter` and :class:`InterruptedBatchLogFilter` on the loggers py4j
    logs a lost JVM's calls and its callbacks' errors to (the root logger takes
    ``logging.exception`` from py4j's gateway); once."""
    for name in ("", "py4j.clientserver", "py4j.java_gateway"):
        target = logging.getLogger(name)
        for log_filter in _JVM_LOG_FILTERS:
            if log_filter not in target.filters:
                target.addFilter(log_filter)


def _quiet_accumulator_server(spark) -> None:
    """PySpark's accumulator server prints a 20-line traceback when the JVM's connection ends (an
    ``EOFError``: the JVM exited); the kit says that in one line.  Other errors still print."""
    import sys

    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None or not hasattr(server, "handle_error"):
        return
    default = server.handle_error

    def handle_error(request, client_address):
        if sys.exc_info()[0] is EOFError:
            return
        default(request, client_address)

    server.handle_error = handle_error


def add_jars(spark, jars: Sequence[str | os.PathLike]) -> None:
    """Add ``jars`` to a running session's class path (``ADD JAR``): a data source in them, such as
    Spark's Kafka connector, can be read from then on.  For a session the kit does not start."""
    for jar in jars:
        path = str(jar)
        if "'" in path:
            raise EngineError(f"a jar path with a quote cannot be added: {path!r}")
        spark.sql(f"ADD JAR '{path}'")


def register_source(spark) -> None:
    """Make ``spark.readStream.format("lmstream")`` available in ``spark``."""
    from .source import LMStreamDataSource

    spark.dataSource.register(LMStreamDataSource)


def spark_version() -> str:
    from pyspark import __version__

    return __version__


def java_version(spark) -> Optional[str]:
    """The driver JVM's ``java.version`` (None for sessions without a local JVM)."""
    try:
        return str(spark.sparkContext._jvm.java.lang.System.getProperty("java.version"))
    except Exception:
        return None


@contextmanager
def session_confs(spark, confs: Mapping[str, str] | None):
    """SQL confs set on ``spark`` for the ``with`` block, and the session's own values put back after."""
    confs = dict(confs or {})
    saved = {key: spark.conf.get(key, None) for key in confs}
    try:
        for key, value in confs.items():
            spark.conf.set(key, str(value))
        yield spark
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)

"""The RAPIDS Accelerator from the Spark side: is the plugin there, and set its confs per batch.

The decisions (which keys, which values) are made in :mod:`lmstream_kit.rapids` without Spark.
This module only asks the JVM through py4j and calls ``session.conf.set``.  It does not import
pyspark; it takes the sessions it is handed.

Set the confs on the session the streaming query plans its batches with.  That is the cloned
session that ``foreachBatch`` sees as ``batch_df.sparkSession``, the same clone for every batch.
``spark.conf.set`` on the outer session after ``start()`` never reaches a running query.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..rapids import RAPIDS_CONF_CLASS, conf_diff, plugin_listed

__all__ = [
    "apply_confs",
    "jvm_class_loadable",
    "jvm_resource_properties",
    "plugin_loaded",
    "rapids_runtime_version",
]

#: written into the root of the rapids-4-spark jar by its build
VERSION_RESOURCE = "rapids4spark-version-info.properties"


def _jvm(spark):
    return spark.sparkContext._jvm


def _class_loader(jvm):
    # Spark's own loader sees --jars and the URLs the plugin adds for its shim; py4j's may not
    try:
        return jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    except Exception:
        return jvm.java.lang.Thread.currentThread().getContextClassLoader()


def jvm_class_loadable(spark, class_name: str) -> bool:
    """Whether the driver JVM can load ``class_name`` with Spark's class loader (never raises)."""
    try:
        jvm = _jvm(spark)
        jvm.java.lang.Class.forName(class_name, False, _class_loader(jvm))
        return True
    except Exception:
        return False


def jvm_resource_properties(spark, resource: str) -> dict[str, str] | None:
    """A ``.properties`` resource on the driver's class path as a dict, or ``None`` when absent.

    Never raises: any failure also gives ``None``.
    """
    try:
        jvm = _jvm(spark)
        stream = _class_loader(jvm).getResourceAsStream(resource)
        if stream is None:
            return None
        try:
            props = jvm.java.util.Properties()
            props.load(stream)
        finally:
            stream.close()
        return {str(k): str(props.getProperty(k)) for k in props.stringPropertyNames()}
    except Exception:
        return None


def _plugins_conf(spark) -> str | None:
    try:
        return spark.sparkContext.getConf().get("spark.plugins", None)
    except Exception:
        try:
            return spark.conf.get("spark.plugins", None)
        except Exception:
            return None


def plugin_loaded(spark) -> bool:
    """Whether the RAPIDS Accelerator is running in this Spark application.

    Both must hold: ``spark.plugins`` names ``com.nvidia.spark.SQLPlugin``, and the driver JVM can
    load ``com.nvidia.spark.rapids.RapidsConf``.  That class sits in the shim-specific part of
    the rapids-4-spark jar.  Spark's class loader sees it only after the plugin has started and
    picked a shim for this Spark version, so the check fails when the jar is missing or the
    plugin did not start.  Any error gives ``False``.
    """
    try:
        return plugin_listed(_plugins_conf(spark)) and jvm_class_loadable(spark, RAPIDS_CONF_CLASS)
    except Exception:
        return False


def rapids_runtime_version(spark) -> str | None:
    """The version of the rapids-4-spark jar on the driver's class path (``"26.06.0"``), or ``None``.

    Read from the jar's ``rapids4spark-version-info.properties``.  This does not say that the plugin
    is enabled: see :func:`plugin_loaded`.
    """
    props = jvm_resource_properties(spark, VERSION_RESOURCE)
    return (props or {}).get("version") or None


def apply_confs(session, confs: Mapping[str, str], previous: Mapping[str, str] | None = None) -> dict:
    """Set on ``session`` the keys of ``confs`` that differ from ``previous``; return what is applied.

    Parameters
    ----------
    session
        The SparkSession that plans the stream's batches (the clone ``foreachBatch`` sees as
        ``batch_df.sparkSession``).
    confs
        The confs wanted now, ``str`` to ``str`` (e.g. ``rapids_confs(plan).confs``).
    previous
        What the previous call returned, or ``None`` to set every key.

    Returns
    -------
    dict
        ``previous`` updated with ``confs``.  Keys in ``previous`` that ``confs`` leaves out stay
        set (see :class:`lmstream_kit.rapids.ConfDiff`).  Pass it back as ``previous`` next batch.
    """
    diff = conf_diff(previous, confs)
    for key, value in diff.changed.items():
        session.conf.set(key, value)
    return diff.applied


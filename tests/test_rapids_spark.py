"""The RAPIDS adapter on a real local Spark without the plugin: detection and conf application."""

from __future__ import annotations

import pyspark
import pytest

from lmstream_kit.engine.rapids import (
    apply_confs,
    jvm_class_loadable,
    jvm_resource_properties,
    plugin_loaded,
    rapids_runtime_version,
)
from lmstream_kit.rapids import RAPIDS_CONF_CLASS

pytestmark = pytest.mark.spark


def test_plain_local_spark_has_no_rapids_plugin(spark):
    assert plugin_loaded(spark) is False
    assert rapids_runtime_version(spark) is None
    assert jvm_class_loadable(spark, RAPIDS_CONF_CLASS) is False


def test_class_probe_sees_classes_that_exist(spark):
    # the probe behind plugin_loaded must answer True for a loadable class, or it proves nothing
    assert jvm_class_loadable(spark, "org.apache.spark.sql.internal.SQLConf") is True
    assert jvm_class_loadable(spark, "org.apache.spark.api.plugin.SparkPlugin") is True


def test_resource_reader_reads_sparks_own_version_file(spark):
    # the same reader gives rapids_runtime_version; spark-core ships this file at its jar root
    props = jvm_resource_properties(spark, "spark-version-info.properties")
    assert props is not None and props["version"] == pyspark.__version__
    assert jvm_resource_properties(spark, "no-such-resource.properties") is None


def test_broken_session_is_not_loaded():
    assert plugin_loaded(object()) is False
    assert rapids_runtime_version(object()) is None


def test_apply_confs_sets_keys_and_then_only_changed_ones(spark):
    session = spark.newSession()  # keep the shared session's conf clean
    first = {
        "spark.rapids.sql.enabled": "true",
        "spark.rapids.sql.exec.FilterExec": "true",
        "spark.rapids.sql.exec.SortExec": "false",
    }
    applied = apply_confs(session, first)
    assert applied == first
    for key, value in first.items():
        assert session.conf.get(key) == value

    # A key changed behind the adapter's back shows whether it is set again.
    session.conf.set("spark.rapids.sql.exec.FilterExec", "sentinel")
    second = {**first, "spark.rapids.sql.exec.SortExec": "true", "spark.rapids.sql.exec.ProjectExec": "false"}
    applied2 = apply_confs(session, second, previous=applied)
    assert applied2 == second
    assert session.conf.get("spark.rapids.sql.exec.SortExec") == "true"
    assert session.conf.get("spark.rapids.sql.exec.ProjectExec") == "false"
    assert session.conf.get("spark.rapids.sql.enabled") == "true"
    assert session.conf.get("spark.rapids.sql.exec.FilterExec") == "sentinel"  # unchanged: not set

    # without `previous` every key is set again
    apply_confs(session, second)
    assert session.conf.get("spark.rapids.sql.exec.FilterExec") == "true"
    # the shared session never saw any of it
    assert spark.conf.get("spark.rapids.sql.exec.SortExec", None) is None

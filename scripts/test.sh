#!/usr/bin/env bash
# One command: install the kit with its test tools and run the whole test suite.
#   scripts/test.sh                  full suite on the default PySpark (4.1.x)
#   scripts/test.sh --spark 4.3      the Spark integration tests on PySpark 4.3.x
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
line=default
if [ "${1:-}" = "--spark" ]; then
  line=$2; shift 2
fi
case "$line" in
  default|4.1) venv=.venv; constraints=constraints/default.txt; extras=dev,notebook; select=() ;;
  # the 4.3 line: the Spark integration tests of what depends on Spark's version (the source
  # API, plan extraction, query semantics, restarts, the cluster), without the slow ones, which
  # repeat end to end what the faster tests check; the RAPIDS and twin tests stay on the 4.1 line
  # (the RAPIDS jar needs 4.1.1), and so do the notebooks (keeps CI under its time budget) and the
  # timing tests, whose wall-clock bounds test the controller, not Spark's version
  4.3) venv=.venv-spark43; constraints=constraints/spark43.txt; extras=dev
       select=(tests/test_kafka_spark.py tests/test_kafka_live.py tests/test_chaos_kafka.py
               tests/test_stream_spark.py tests/test_plan_spark.py tests/test_workload_correctness.py
               tests/test_devices_spark.py tests/test_ingest_spark.py tests/test_cluster.py tests/test_own_query.py
               tests/test_session_logging.py tests/test_swap_spark.py tests/test_chaos_reconfigure.py
               tests/test_flumina_spark.py tests/test_flumina_workload.py tests/test_signals_spark.py
               tests/test_cli.py::test_reconfigure_changes_a_running_stream_from_another_process
               tests/test_chaos_input.py::test_kill_9_while_files_land_loses_and_doubles_no_row
               -m "(spark or cluster) and not slow and not timing") ;;
  *) echo "error: unknown Spark line '$line' (use 4.1 or 4.3)" >&2; exit 2 ;;
esac
make_venv "$venv" "$constraints" "$extras"
echo "pyspark $("$venv/bin/python" -c 'import pyspark; print(pyspark.__version__)'), running tests ..."
exec "$venv/bin/python" -m pytest "${select[@]}" "$@"

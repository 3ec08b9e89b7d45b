# Shared by demo.sh and test.sh: create a virtual environment and install the kit.
#   make_venv DIR CONSTRAINTS EXTRAS
set -euo pipefail
make_venv() {
  local dir=$1 constraints=$2 extras=$3
  local py=${PYTHON:-python3}
  if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
    echo "error: Java not found: Spark needs a Java 17 runtime (e.g. apt-get install openjdk-17-jre-headless)" >&2
    exit 2
  fi
  if [ ! -x "$dir/bin/python" ]; then
    echo "creating virtual environment $dir ..."
    "$py" -m venv "$dir"
  fi
  local stamp="$dir/.lmstream-installed"
  local want
  want=$(cat pyproject.toml "$constraints" | sha1sum | cut -c1-12)-$extras
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing lmstream_kit[$extras] into $dir (about a minute the first time) ..."
    local log="$dir/install.log"
    # pip's and setuptools' chatter goes to a log; it is shown only if the install fails
    if ! { "$dir/bin/python" -m pip install --upgrade pip &&
           "$dir/bin/python" -m pip install -c "$constraints" -e ".[$extras]"; } >"$log" 2>&1; then
      tail -n 40 "$log" >&2
      echo "error: installing lmstream_kit failed; the full log is $log" >&2
      exit 1
    fi
    echo "$want" > "$stamp"
  fi
  # Spark's classes in a class-data archive, built once per Java runtime and PySpark version (about
  # a minute): every later driver starts about a third sooner. Not fatal: without it Spark
  # starts the ordinary way. LMSTREAM_CLASS_ARCHIVE=0 skips it.
  if [ "${LMSTREAM_CLASS_ARCHIVE:-1}" != "0" ]; then
    "$dir/bin/lmstream-kit" class-archive ||
      echo "warning: no class-data archive (see above); Spark's driver starts the ordinary way" >&2
  fi
}

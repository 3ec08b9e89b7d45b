#!/usr/bin/env bash
# Re-execute every notebook in notebooks/ (papermill) and render each to HTML, in .venv.
#   scripts/notebooks.sh            full parameters (longer streams), into runs/notebooks/<time>/
#   scripts/notebooks.sh --quick    the notebooks' small defaults, as CI runs them
# Other arguments go to scripts/run_notebooks.py (--only NAME, --out DIR, --no-html).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
make_venv .venv constraints/default.txt dev,notebook
exec .venv/bin/python scripts/run_notebooks.py "$@"

#!/usr/bin/env bash
# One command for a newcomer: install the kit into .venv and run the demo stream
# (Linear Road LR2S, random traffic, the LMStream admission controller, embedded
# local Spark).  Extra arguments go to `lmstream-kit run`, e.g. --policy fixed.
# It installs what scripts/test.sh installs (same extras, same constraints), so
# either command leaves a .venv the other reuses, with JupyterLab in it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
make_venv .venv constraints/default.txt dev,notebook
exec .venv/bin/lmstream-kit run --workload LR2S --traffic random --rate 1000 \
  --duration 150 --speedup 2.5 --out "runs/demo-$(date +%Y%m%d-%H%M%S)" "$@"

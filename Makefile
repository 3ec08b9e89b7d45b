# Shortcuts for the scripts in scripts/ (each installs the kit into .venv first).
#   make notebooks              every notebook at full parameters, with HTML, into runs/notebooks/<time>/
#   make notebooks ARGS=--quick  the same at the notebooks' small CI defaults
#   make lab                    JupyterLab on notebooks/
#   make test                   the whole test suite (scripts/test.sh)
#   make demo                   the demo stream (scripts/demo.sh)

ARGS ?=

.PHONY: notebooks notebooks-quick lab test demo

notebooks:
	scripts/notebooks.sh $(ARGS)

notebooks-quick:
	scripts/notebooks.sh --quick $(ARGS)

lab:
	bash -c 'source scripts/_venv.sh && make_venv .venv constraints/default.txt dev,notebook'
	.venv/bin/jupyter lab notebooks/

test:
	scripts/test.sh $(ARGS)

demo:
	scripts/demo.sh $(ARGS)

#!/usr/bin/env bash
# Creates the Python environment the worker benchmark's PyTorch baseline runs in
# (~/.cache/orrery/bench-venv) and installs torch into it from the package
# registry pip is configured with. Only the benchmark uses it; nothing in the
# build or the tests needs Python.
set -euo pipefail
venv="${ORRERY_BENCH_VENV:-$HOME/.cache/orrery/bench-venv}"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
if "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') already in $venv"
  exit 0
fi
"$venv/bin/pip" install --quiet --upgrade pip
# The registry's default Linux wheel also pulls CUDA libraries (a few GB); it
# runs on CPU all the same.
"$venv/bin/pip" install --quiet torch numpy
"$venv/bin/python" -c 'import torch; print("installed torch", torch.__version__)'

#!/bin/sh
# Creates the Python environment the checkpoint benchmark uses to compare against
# PyTorch's torch.distributed.checkpoint: a venv under ~/.cache/orrery/bench-venv
# with torch from the Python package index. For the benchmark only; nothing in
# Orrery imports Python. Idempotent: does nothing when torch already imports.
set -eu
venv=${ORRERY_BENCH_VENV:-"$HOME/.cache/orrery/bench-venv"}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch.distributed.checkpoint' 2>/dev/null; then
  echo "setup_venv: $venv already has torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The index's Linux wheel pulls the CUDA runtime libraries too (several GB); it
# still runs on CPU, which is all the benchmark uses.
"$venv/bin/python" -m pip install --progress-bar off torch numpy
"$venv/bin/python" -c 'import torch, torch.distributed.checkpoint; print("setup_venv: torch", torch.__version__)'

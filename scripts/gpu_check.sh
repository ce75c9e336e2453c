#!/usr/bin/env bash
# Compile VGG16 and the GPT-2 style model on CUDA at several budgets: predicted vs measured
# peak, step time, and the largest batch under a memory cap with and without remat.
# Under 5 minutes on one H200. Exits 0 with a message on a machine without CUDA.
#   scripts/gpu_check.sh [extra bench/gpu_check.py options, e.g. --cap 24GiB]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: CUDA is not available here (or torch is missing); nothing to check."
    exit 0
fi
exec timeout 600 env PYTHONPATH=. "$PYTHON" bench/gpu_check.py "$@"

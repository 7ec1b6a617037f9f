#!/usr/bin/env bash
# Issue "strongest competitors", a diagnostic of why training adds nothing to a truncating head: where does its
# family's other end lie? typical_head.sh's start is w = 0 everywhere (typical acceptance's ν-form); its rule with
# every decision flipped is w = 1 everywhere: SD against p cut to its typical set (eval/choose_head.py flipped).
# Decoded on the test prompts (data seed 7, decoding seed 8, 300) as "typical_end(w=1)" beside every rule. Any
# per-token head of the family lies between these two ends; a coin flip per prompt between them is on their chord.
# Fixed before its result. Resumable. Usage: bash docs/results/competitors/typical_ends.sh TASK
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: typical_ends.sh TASK}
R=runs/competitors/$TASK
END=$($PY eval/choose_head.py flipped $R/head_typical)
$PY eval/run.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
    method=diversed head=$END "out_dir='$R/test/typical_end(w=1)'"
$PY eval/pool.py $R/test --ref "typical_end(w=1)" > $R/pool_vs_typical_end.md

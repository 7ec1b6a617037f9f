#!/usr/bin/env bash
# Issue "strongest competitors": which head of a training run to ship, decided on run.sh's validation prompts (data
# seed 5, decoding seed 6, 200 prompts): its start (the rule it began at) or a checkpoint, by J = score + λ·acceptance
# (eval/choose_head.py). The chosen head is then decoded on the test prompts (data seed 7, decoding seed 8, 300) as
# "selected(RUN)" beside every rule. Added after the CNN/DM head ended below its start; applied to every task's runs.
# It ran the plain arg-max (--confidence 0, pinned here since choose_head.py's default became the paired gate; the
# gated choices of the same validation runs: gated_choices.py).
# Resumable. Usage: bash docs/results/competitors/select.sh TASK RUN LAMBDA   (RUN e.g. head_rule_start)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: select.sh TASK RUN LAMBDA}; RUN=${2:?}; LAM=${3:?}
R=runs/competitors/$TASK
HEADS=$($PY eval/choose_head.py export $R/$RUN)
$PY eval/frontier.py task=$TASK task.data.seed=5 seed=6 eval.num_samples=200 eval.progress=false resume=true \
    'frontier.baselines=[]' 'frontier.grid=[]' "heads=[$HEADS]" out_dir=$R/val_heads/$RUN
$PY eval/choose_head.py choose $R/val_heads/$RUN --lambda $LAM --confidence 0 --out $R/$RUN/selected.json
HEAD=$($PY -c "import json; print(json.load(open('$R/$RUN/selected.json'))['best']['head'])")
$PY eval/run.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
    method=diversed head=$HEAD "out_dir='$R/test/selected($RUN)'"

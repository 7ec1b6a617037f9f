#!/usr/bin/env bash
# Issue "strongest competitors": the head that corrects its start rule (head.init_mode=flip: w = r + (1 − 2r)·σ(z),
# r the rule's decision, flip probability 0.02 at the start), from the rule validation chose for run.sh's head
# (choice.json), λ = 0.1, 200 steps; then the test prompts (as "flip(λ=0.1)") and validation's choice among the rule,
# the start and the checkpoints (select.sh). Added after the soft start (k = 50) was found below its rule on
# validation on every task. Resumable. Usage: bash docs/results/competitors/flip.sh TASK
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: flip.sh TASK}
R=runs/competitors/$TASK
OVR=$($PY -c "import json; print(json.load(open('$R/val/choice.json'))['overrides'])")
[ -f $R/head_flip/head/config.json ] || $PY train/run.py task=$TASK lambda=0.1 progress=false resume=true $OVR \
    head.init_mode=flip hydra.run.dir=$R/head_flip
$PY eval/run.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
    method=diversed head=$R/head_flip/head "out_dir='$R/test/flip(λ=0.1)'"
bash docs/results/competitors/select.sh $TASK head_flip 0.1

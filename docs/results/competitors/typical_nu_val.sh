#!/usr/bin/env bash
# Issue "strongest competitors", added after typical_nu.sh's test points: the ν-form of typical acceptance is what a
# truncating head is at w = 0, so the start's choice must see it too. The same three ε on run.sh's validation prompts
# (data seed 5, decoding seed 6, 200), then eval/choose_start.py over every validation rule, written to
# val/choice_typical_nu.json. Resumable. Usage: bash docs/results/competitors/typical_nu_val.sh TASK
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: typical_nu_val.sh TASK}
R=runs/competitors/$TASK
for eps in 0.3 0.1 0.03; do
  $PY eval/run.py task=$TASK task.data.seed=5 seed=6 eval.num_samples=200 eval.progress=false resume=true \
      method=typical method.epsilon=$eps method.bonus=nu "out_dir='$R/val/typical(eps=$eps,nu)'"
done
$PY eval/choose_start.py $R/val --lambda 0.1 --out $R/val/choice_typical_nu.json

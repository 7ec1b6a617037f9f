#!/usr/bin/env bash
# Issue "strongest competitors": the λ sweep of the head of typical_head.sh (whose family holds typical acceptance and
# its ν-form). Fixed before any result, for each λ:
#   start:  eval/choose_start.py over every validation rule of run.sh + typical_head.sh + typical_nu_val.sh (data
#           seed 5, decoding seed 6, 200 prompts), J = score + λ·acceptance, so a larger λ may start at a looser rule;
#   train:  the flip head from that start (head.init_mode=flip), the same λ, 200 steps, KL to the start;
#   ship:   validation's choice among the rule, the start and the checkpoints at the same J (select.sh), decoded on the
#           test prompts (data seed 7, decoding seed 8, 300) as "selected(head_typical_lamλ)"; the last checkpoint is
#           decoded there too, as "typical_flip(λ=λ)", to show what training alone did;
#   report: eval/pool.py against the envelope of every training-free rule, written to pool_vs_selected_*.md.
# λ = 0.1 is typical_head.sh's own head. Resumable (rerun the same command).
# Usage: bash docs/results/competitors/typical_lambda_sweep.sh TASK [LAMBDAS (default "0.03 0.3 1")]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: typical_lambda_sweep.sh TASK [LAMBDAS]}
LAMBDAS=${2:-"0.03 0.3 1"}
R=runs/competitors/$TASK
for LAM in $LAMBDAS; do
  RUN=head_typical_lam$LAM
  D=$R/$RUN
  mkdir -p "$D"
  $PY eval/choose_start.py $R/val --lambda "$LAM" --out "$D/choice.json"
  OVR=$($PY -c "import json; print(json.load(open('$D/choice.json'))['overrides'])")
  [ -f "$D/head/config.json" ] || $PY train/run.py task=$TASK lambda="$LAM" progress=false resume=true $OVR \
      head.init_mode=flip hydra.run.dir="$D"
  $PY eval/run.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
      method=diversed head=$D/head "out_dir='$R/test/typical_flip(λ=$LAM)'"
  bash docs/results/competitors/select.sh $TASK $RUN "$LAM"
  $PY eval/pool.py $R/test --ref "selected($RUN)" > $R/pool_vs_selected_$RUN.md
done

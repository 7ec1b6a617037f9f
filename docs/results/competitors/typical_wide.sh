#!/usr/bin/env bash
# Issue "strongest competitors", added after typical_lambda_sweep.sh and typical_ends.sh: on GSM8K typical
# acceptance's score still rose at the widest ε swept (0.03 → 0.1 → 0.3), so its knob was not bracketed and the
# envelope may sit too low. ε = 0.5 and 1 (δ = sqrt(ε) as before), both forms, on the validation prompts (data seed 5,
# decoding seed 6, 200) and the test prompts (data seed 7, decoding seed 8, 300); then every shipped typical-family
# head's gap to the widened envelope, and validation's start choice again (val/choice_typical_wide.json), to say
# whether the start would change. Fixed before its results. Resumable.
# Usage: bash docs/results/competitors/typical_wide.sh TASK
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: typical_wide.sh TASK}
R=runs/competitors/$TASK
for eps in 0.5 1; do
  for bonus in nu p; do
    suffix=$([ $bonus == nu ] && echo ",nu" || echo "")
    $PY eval/run.py task=$TASK task.data.seed=5 seed=6 eval.num_samples=200 eval.progress=false resume=true \
        method=typical method.epsilon=$eps method.bonus=$bonus "out_dir='$R/val/typical(eps=$eps$suffix)'"
    $PY eval/run.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
        method=typical method.epsilon=$eps method.bonus=$bonus "out_dir='$R/test/typical(eps=$eps$suffix)'"
  done
done
$PY eval/choose_start.py $R/val --lambda 0.1 --out $R/val/choice_typical_wide.json
for RUN in head_typical head_typical_lam0.03 head_typical_lam0.3 head_typical_lam1; do
  [ -f "$R/test/selected($RUN)/metrics.json" ] && $PY eval/pool.py $R/test --ref "selected($RUN)" \
      > $R/pool_vs_selected_$RUN.md
done
exit 0

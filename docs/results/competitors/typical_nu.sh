#!/usr/bin/env bash
# Issue "strongest competitors", added after typical_head.sh's GSM8K result: the head's start there (a truncating head
# at w = 0) is typical acceptance's ν-form (the bonus token from typical's ν, not p: TypicalRule(bonus="nu")), a
# training-free rule the envelope did not hold. It is run here on the test prompts (data seed 7, decoding seed 8, 300)
# for ε = 0.3 / 0.1 / 0.03 as "typical(eps=ε, nu)", so that eval/pool.py's envelope holds it, and the heads'
# gaps to the envelope are recomputed. Resumable. Usage: bash docs/results/competitors/typical_nu.sh TASK
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: typical_nu.sh TASK}
R=runs/competitors/$TASK
for eps in 0.3 0.1 0.03; do
  $PY eval/run.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
      method=typical method.epsilon=$eps method.bonus=nu "out_dir='$R/test/typical(eps=$eps,nu)'"
done
# the same files typical_head.sh writes, now with the ν-form points in the envelope
[ -f "$R/test/typical_flip(λ=0.1)/metrics.json" ] && $PY eval/pool.py $R/test --ref "typical_flip(λ=0.1)" \
    > $R/pool_vs_typical_flip.md
[ -f "$R/test/selected(head_typical)/metrics.json" ] && $PY eval/pool.py $R/test --ref "selected(head_typical)" \
    > $R/pool_vs_selected_head_typical.md
exit 0

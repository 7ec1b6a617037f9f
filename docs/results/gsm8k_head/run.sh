#!/usr/bin/env bash
# The head against static ensembles, SD and AutoJudge on the embedded trio (GSM8K synthetic, T=1, gamma=4),
# 300 held-out prompts, eval seed 1 (training seed 0). Every stage resumes: re-run the script to continue.
# Runs two jobs at a time (2 cores, 1 torch thread each).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/results/gsm8k_head}
N=${N:-300}
BUDGET=${BUDGET:-150000}   # decoded tokens per trained head (rollouts + fork continuations)
mkdir -p "$OUT"

# 1. baselines and the static sweep (one process) || the heads at equal compute (another)
$PY eval/frontier.py task=gsm8k seed=1 eval.num_samples=$N eval.progress=false out_dir=$OUT/frontier_base resume=true \
  'frontier.grid=[0.0,0.25,0.5,0.7,0.85,0.95]' 'frontier.baselines=[sd,ar_target,lossy,cascade]' \
  > $OUT/frontier_base.log 2>&1 &
$PY diagnostics/advantages.py --task gsm8k --lam 0.1 --budget $BUDGET --eval-n $N --eval-seed 1 --out $OUT/adv \
  --variants critic_greedy returns forks_greedy > $OUT/adv.log 2>&1
wait

# 2. AutoJudge (mining on training prompts) || the lambda sweep of the chosen estimator
( [ -f $OUT/autojudge/head/config.json ] || $PY train/autojudge.py task=gsm8k mine.prompts=${AJ_PROMPTS:-400} hydra.run.dir=$OUT/autojudge ) \
  && $PY eval/run.py task=gsm8k method=autojudge head=$OUT/autojudge/head seed=1 eval.num_samples=$N \
       out_dir=$OUT/autojudge_eval resume=true eval.progress=false > $OUT/autojudge.log 2>&1 &
for lam in ${LAMS:-0.3}; do
  $PY diagnostics/advantages.py --task gsm8k --lam $lam --budget $BUDGET --eval-n $N --eval-seed 1 --out $OUT/adv \
    --variants ${VARIANT:-critic_greedy} >> $OUT/adv.log 2>&1
done
wait

# 3. one picture and one table from everything above
$PY eval/frontier.py "frontier.from_dirs=[$OUT/frontier_base,$OUT/adv,$OUT/autojudge_eval]" out_dir=$OUT/frontier

#!/usr/bin/env bash
# Issue "strongest competitors": AutoJudge (labels from the task reward) and SelfJudge (labels from the target's own
# log-likelihood of its next 20 tokens, no reward) on the embedded trio, each mined on 400 training prompts and
# decoded on run.sh's 300 test prompts (data seed 7, decoding seed 8) at its exported threshold (90% recall of the
# important mismatches) and at thresholds 0.03, 0.1, 0.3, into run.sh's test directory (paired there by eval/pool.py).
# Fixed before any result. Resumable (rerun the same command). Usage: bash docs/results/competitors/judges.sh TASK
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: judges.sh TASK}
R=runs/competitors/$TASK
for LABEL in reward selfjudge; do
  NAME=$([ $LABEL == reward ] && echo autojudge || echo selfjudge)
  J=$R/$NAME
  [ -f $J/head/config.json ] || $PY train/autojudge.py task=$TASK mine.prompts=400 mine.label=$LABEL hydra.run.dir=$J
  EV=(task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true method=autojudge
      head=$J/head)
  $PY eval/run.py "${EV[@]}" "out_dir='$R/test/$NAME(exported)'"
  for T in 0.03 0.1 0.3; do
    $PY eval/run.py "${EV[@]}" method.threshold=$T "out_dir='$R/test/$NAME(t=$T)'"
  done
done
$PY eval/pool.py $R/test --ref sd

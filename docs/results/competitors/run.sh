#!/usr/bin/env bash
# Issue "strongest competitors", one task (gsm8k, mbpp, ...) on the embedded trio (this machine's build), T = 1,
# fixed before any result (GSM8K ran first; MBPP ran the same steps 1-3 unchanged):
#   1. validation (data seed 5, decoding seed 6, 200 prompts, never used before): sd, static 0.85 and the cascade
#      sweep; eval/choose_start.py picks the head's start by J = score + 0.1 * acceptance.
#   2. two heads of the user's command (lambda = 0.1, 200 steps): B from the default start (w = 0.5), A from the
#      chosen rule (head.init_rule / init_knob, sharpness 50); the KL reference is each one's start.
#   3. test (data seed 7, decoding seed 8, 300 prompts, never used before): sd, the cascade, fsd and typical sweeps
#      and both heads on the same prompts (paired within the run directory: eval/pool.py --ref).
# Resumable (rerun the same command). Usage: bash docs/results/competitors/run.sh TASK [STEP]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: run.sh TASK [STEP]}
R=runs/competitors/$TASK
STEP=${2:-all}
if [[ $STEP == all || $STEP == val ]]; then
  $PY eval/frontier.py task=$TASK task.data.seed=5 seed=6 eval.num_samples=200 eval.progress=false resume=true \
      'frontier.baselines=[sd]' 'frontier.grid=[0.85]' 'frontier.sweep_methods=[cascade]' out_dir=$R/val
  $PY eval/choose_start.py $R/val --lambda 0.1
fi
if [[ $STEP == all || $STEP == trainB ]]; then
  $PY train/run.py task=$TASK lambda=0.1 progress=false hydra.run.dir=$R/head_default
fi
if [[ $STEP == all || $STEP == trainA ]]; then
  OVR=$($PY -c "import json; print(json.load(open('$R/val/choice.json'))['overrides'])")
  $PY train/run.py task=$TASK lambda=0.1 progress=false $OVR hydra.run.dir=$R/head_rule_start
fi
if [[ $STEP == all || $STEP == test ]]; then
  $PY eval/frontier.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
      'frontier.baselines=[sd]' 'frontier.grid=[]' 'frontier.sweep_methods=[cascade,fsd,typical]' \
      'frontier.sweeps.fsd.threshold=[0.3,1.0,2.0,4.0]' 'frontier.sweeps.typical.epsilon=[0.3,0.1,0.03]' \
      "heads=[$R/head_rule_start/head,$R/head_default/head]" out_dir=$R/test
  $PY eval/pool.py $R/test --ref sd
fi
# 4. (added after step 3's results) FLy is greedy-only in its paper: the same 300 test prompts at T = 0, with sd,
#    the cascade sweep, static 0.5 and both heads beside it.
if [[ $STEP == all || $STEP == greedy ]]; then
  $PY eval/frontier.py task=$TASK task.data.seed=7 seed=8 temperature=0 eval.num_samples=300 eval.progress=false \
      resume=true 'frontier.baselines=[sd]' 'frontier.grid=[0.5]' 'frontier.sweep_methods=[fly,cascade]' \
      "heads=[$R/head_rule_start/head,$R/head_default/head]" out_dir=$R/test_T0
  $PY eval/pool.py $R/test_T0
fi

#!/usr/bin/env bash
# Issue "strongest competitors": a λ sweep of the rule-start head of run.sh (after its val and test steps). For each
# λ, eval/choose_start.py picks the start on the same validation runs with J = score + λ · acceptance (so a larger λ
# may start at a looser rule), train/run.py trains 200 steps from there with the KL to that start, and the head is
# decoded on run.sh's 300 test prompts, into the same directory (paired with every rule there by eval/pool.py).
# λ = 0.1 is run.sh's own head. Resumable (rerun the same command).
# Usage: bash docs/results/competitors/lambda_sweep.sh TASK [LAMBDAS (default "0.03 0.3 1")]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: lambda_sweep.sh TASK [LAMBDAS]}
LAMBDAS=${2:-"0.03 0.3 1"}
R=runs/competitors/$TASK
HEADS=()
for LAM in $LAMBDAS; do
  D=$R/head_rule_start_lam$LAM
  mkdir -p "$D"
  $PY eval/choose_start.py $R/val --lambda "$LAM" --out "$D/choice.json"
  OVR=$($PY -c "import json; print(json.load(open('$D/choice.json'))['overrides'])")
  [ -f "$D/head/config.json" ] || $PY train/run.py task=$TASK lambda="$LAM" progress=false resume=true $OVR hydra.run.dir="$D"
  HEADS+=("$D/head")
done
LIST=$(IFS=,; echo "${HEADS[*]}")
$PY eval/frontier.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
    'frontier.baselines=[]' 'frontier.grid=[]' "heads=[$LIST]" out_dir=$R/test
$PY eval/pool.py $R/test --ref sd

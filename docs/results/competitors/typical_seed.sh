#!/usr/bin/env bash
# Issue "strongest competitors": a second training seed of typical_head.sh's head (the same start, λ = 0.1, 200
# steps, flip head), to say whether "training ends level with its start" is one seed's draw. Fixed before its result:
# train with seed=SEED into head_typical_seedSEED, decode the last checkpoint on the test prompts (data seed 7,
# decoding seed 8, 300) as "typical_flip_seedSEED(λ=0.1)", and validation's choice (select.sh) as
# "selected(head_typical_seedSEED)", each against the envelope of every training-free rule.
# Resumable. Usage: bash docs/results/competitors/typical_seed.sh TASK SEED
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: typical_seed.sh TASK SEED}; SEED=${2:?usage: typical_seed.sh TASK SEED}
R=runs/competitors/$TASK
CHOICE=$R/val/choice_typical_nu.json  # typical_head.sh's start
OVR=$($PY -c "import json; print(json.load(open('$CHOICE'))['overrides'])")
RUN=head_typical_seed$SEED
[ -f $R/$RUN/head/config.json ] || $PY train/run.py task=$TASK lambda=0.1 seed=$SEED progress=false resume=true \
    $OVR head.init_mode=flip hydra.run.dir=$R/$RUN
$PY eval/run.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
    method=diversed head=$R/$RUN/head "out_dir='$R/test/typical_flip_seed$SEED(λ=0.1)'"
bash docs/results/competitors/select.sh $TASK $RUN 0.1
$PY eval/pool.py $R/test --ref "typical_flip_seed$SEED(λ=0.1)" > $R/pool_vs_typical_flip_seed$SEED.md
$PY eval/pool.py $R/test --ref "selected($RUN)" > $R/pool_vs_selected_$RUN.md

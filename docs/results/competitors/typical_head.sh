#!/usr/bin/env bash
# Issue "strongest competitors": a head whose family contains typical acceptance (target.typical_epsilon: ν cut to
# p's typical set; w = 0 is typical acceptance, w = 1 SD against the truncated p). Fixed before any result:
#   val:    typical ε = 0.3 / 0.1 / 0.03 added to run.sh's validation sweep (data seed 5, decoding seed 6, 200
#           prompts), then eval/choose_start.py over every rule there (J = score + 0.1·acceptance), written to
#           val/choice_typical.json. If it picks a rule without truncation, the run is flip.sh's: stop there.
#   train:  the flip head from that start (head.init_mode=flip, flip probability 0.02), λ = 0.1, 200 steps.
#   test:   the trained head on the test prompts (data seed 7, decoding seed 8, 300) as "typical_flip(λ=0.1)",
#           validation's choice among the rule, the start and the checkpoints (select.sh), and both against the
#           envelope of every training-free rule (eval/pool.py --ref).
# Resumable. Usage: [WIDE=1] bash docs/results/competitors/typical_head.sh TASK [val | train | test | all]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled OMP_NUM_THREADS=1
PY=.venv/bin/python
TASK=${1:?usage: typical_head.sh TASK [STEP]}; STEP=${2:-all}
R=runs/competitors/$TASK
if [[ $STEP == all || $STEP == val ]]; then
  $PY eval/frontier.py task=$TASK task.data.seed=5 seed=6 eval.num_samples=200 eval.progress=false resume=true \
      'frontier.baselines=[sd]' 'frontier.grid=[0.85]' 'frontier.sweep_methods=[cascade,typical]' \
      'frontier.sweeps.typical.epsilon=[0.3,0.1,0.03]' out_dir=$R/val
  $PY eval/choose_start.py $R/val --lambda 0.1 --out $R/val/choice_typical.json
fi
# typical_nu_val.sh (added after the first results) adds typical's ν-form to the validation rules and writes its own
# choice; where it exists it is the start (on GSM8K and CNN/DM it is the same start, ε = 0.3)
CHOICE=$R/val/choice_typical_nu.json; [ -f $CHOICE ] || CHOICE=$R/val/choice_typical.json
# typical_wide.sh (added later still) widens ε to 0.5 and 1; WIDE=1 trains from its choice into head_typical_wide
RUN=head_typical; FLIP="typical_flip(λ=0.1)"
if [[ ${WIDE:-0} == 1 ]]; then CHOICE=$R/val/choice_typical_wide.json; RUN=head_typical_wide; FLIP="typical_wide_flip(λ=0.1)"; fi
EPS=$($PY -c "import json; print(json.load(open('$CHOICE'))['best'].get('typical_epsilon', 0))")
if [[ $EPS == 0 || $EPS == 0.0 ]]; then
  echo "[typical_head.sh] validation chose a rule without truncation: this run is flip.sh's"; exit 0
fi
OVR=$($PY -c "import json; print(json.load(open('$CHOICE'))['overrides'])")
if [[ $STEP == all || $STEP == train ]]; then
  [ -f $R/$RUN/head/config.json ] || $PY train/run.py task=$TASK lambda=0.1 progress=false resume=true \
      $OVR head.init_mode=flip hydra.run.dir=$R/$RUN
fi
if [[ $STEP == all || $STEP == test ]]; then
  $PY eval/run.py task=$TASK task.data.seed=7 seed=8 eval.num_samples=300 eval.progress=false resume=true \
      method=diversed head=$R/$RUN/head "out_dir='$R/test/$FLIP'"
  bash docs/results/competitors/select.sh $TASK $RUN 0.1
  $PY eval/pool.py $R/test --ref "$FLIP" > $R/pool_vs_${FLIP%%(*}.md
  $PY eval/pool.py $R/test --ref "selected($RUN)" > $R/pool_vs_selected_$RUN.md
fi

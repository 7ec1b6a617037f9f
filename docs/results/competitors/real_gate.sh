#!/usr/bin/env bash
# Issue "strongest competitors" (the dense SelfJudge signal for the head) on real MBPP: a gate head fit on SelfJudge's
# likelihood harms (train/gate.py) instead of trained by REINFORCE++. Fixed before any result (2026-12-06):
#   source:     the SelfJudge mining of real_judges.sh (128 training problems, 273 mismatches; disjoint from the
#               test draw, data seed 11, and the validation draw, data seed 13), whose hidden-state prediction
#               ordered pass@1 harm in docs/results/real/fork_gaps_mbpp_selfjudge (a hint);
#   gate:       ridge on the head's whole input, w = 1 (the typical-truncated target) where the predicted harm is
#               above the q-quantile of the out-of-fold predictions, w = 0 (typical acceptance at ε = 0.03: more
#               permissive than the envelope's ε = 0.3 / 0.1, so the gate spends relaxation only where it predicts
#               it cheap) elsewhere; sharpness 50; q in {0.2, 0.5};
#   validation: run_real.sh's settings on real_head.sh's 64 validation problems (data seed 13, decoding seed 14):
#               typical(ε = 0.03, ν) and both gates; the rules' validation points are in real_mbpp/val_frontier.md
#               (same problems and seeds; their per-problem records were lost with an earlier runs/);
#   choice:     the gate with the higher J = score + 0.1·acceptance on validation goes to test, whatever the rules
#               score there (the gate is the experiment; the rules are decoded beside it);
#   test:       the chosen gate (step test), typical(ε = 0.03, ν) and typical's ν-form at ε = 0.3 / 0.1 (the envelope's points
#               near the gate; decoded again, their earlier records lost) on run_real.sh's 64 test problems (data
#               seed 11, decoding seed 12; step test_rules), paired with every rule in t1_n64 by eval/pool.py.
# VARIANT strict (added after gate q = 0.2's validation point, 0.484 at 0.769, below typical ε = 0.3's 0.562 at
# 0.785: its w = 1 end is the target truncated at ε = 0.03, which keeps SD's quality, not typical 0.3's; fixed before
# any strict result): HeadEnsembleRule(typical_end="strict") puts typical acceptance at ε = 0.3, the strongest rule
# on validation and test, at w = 1 and accepts the draft outright at w = 0, so the gate relaxes typical acceptance
# further, only at the swaps it predicts cheapest; the ridge reads the hidden states alone (--inputs hidden: the head's
# pair features are then of (typical's ν, q), the mining's of (p, q)); q in {0.2, 0.5}; the higher validation J goes
# to test, beside the rules of step test_rules.
# Usage: bash docs/results/competitors/real_gate.sh STEP [Q]
#   (STEP: fit | val | fit_strict | val_strict | test_rules | test NAME, NAME a directory under $R/gate). Resumable.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
PY=.venv/bin/python
R=runs/competitors/real_mbpp
EPS=0.03
COMMON=(task=mbpp model=qwen25coder_15b_05b data.path=../shared/data/mbpp/sanitized-mbpp.json
        task.reward_opts.max_workers=1 num_threads=1 temperature=1.0 eval.num_samples=64 eval.max_new_tokens=128
        eval.batch_size=8 eval.progress=false resume=true)
VAL=("${COMMON[@]}" "data.holdout=[{n:64,seed:11}]" task.data.seed=13 seed=14)
TEST=("${COMMON[@]}" task.data.seed=11 seed=12)
timed() { local t0=$SECONDS; nice -n 5 "$@"; echo "[real_gate.sh] ${*: -1} took $((SECONDS - t0)) s"; }
case ${1:?usage: real_gate.sh STEP [Q]} in
  fit) for Q in 0.2 0.5; do
         $PY train/gate.py $R/selfjudge --quantile $Q --typical-epsilon $EPS --out $R/gate/gate_q$Q
       done ;;
  val) timed $PY eval/run.py "${VAL[@]}" method=typical method.epsilon=$EPS method.bonus=nu \
           "out_dir='$R/val_gate/typical(eps=$EPS,nu)'"
       for Q in 0.2 0.5; do
         timed $PY eval/run.py "${VAL[@]}" method=diversed head=$R/gate/gate_q$Q "out_dir='$R/val_gate/gate(q=$Q,eps=$EPS)'"
       done ;;
  fit_strict) for Q in 0.2 0.5; do
         $PY train/gate.py $R/selfjudge --quantile $Q --typical-epsilon 0.3 --typical-end strict --inputs hidden \
             --out $R/gate/strict_q$Q
       done ;;
  val_strict) for Q in 0.2 0.5; do
         timed $PY eval/run.py "${VAL[@]}" method=diversed head=$R/gate/strict_q$Q "out_dir='$R/val_gate/strict(q=$Q)'"
       done ;;
  test_rules) for E in 0.3 0.1 $EPS; do
          timed $PY eval/run.py "${TEST[@]}" method=typical method.epsilon=$E method.bonus=nu \
              "out_dir='$R/t1_n64/typical(eps=$E,nu)'"
        done ;;
  test) NAME=${2:?usage: real_gate.sh test NAME}
        timed $PY eval/run.py "${TEST[@]}" method=diversed head=$R/gate/$NAME "out_dir='$R/t1_n64/diversed($NAME)'" ;;
  *) echo "real_gate.sh: STEP is fit, val, fit_strict, val_strict, test_rules or test NAME" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# real_gate.sh's third variant, two_eps (added after the strict gate's q = 0.2 validation point, 0.469 at 0.824, below
# typical ε = 0.1's 0.547 at 0.821: accepting the draft outright at w = 0 takes tokens typical acceptance would
# screen out; fixed before any two_eps result): HeadEnsembleRule(typical_end="strict", relaxed_epsilon=0.03), i.e.
# typical acceptance at ε = 0.3 where the gate predicts a costly swap and at ε = 0.03 elsewhere. Typical's own knob
# moved uniformly (ε = 0.1, decoded by real_gate.sh test_rules on the same problems) is its direct opponent: the
# SelfJudge ranking carries information beyond typical acceptance's only if the gate beats that line. One cut,
# q = 0.5, the hidden states alone; validation (a report: there is one candidate), then test, with real_gate.sh's
# problems, seeds and settings. Usage: bash docs/results/competitors/real_gate_two_eps.sh fit | val | test.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
PY=.venv/bin/python
R=runs/competitors/real_mbpp
NAME=two_eps_q0.5
COMMON=(task=mbpp model=qwen25coder_15b_05b data.path=../shared/data/mbpp/sanitized-mbpp.json
        task.reward_opts.max_workers=1 num_threads=1 temperature=1.0 eval.num_samples=64 eval.max_new_tokens=128
        eval.batch_size=8 eval.progress=false resume=true method=diversed head=$R/gate/$NAME)
timed() { local t0=$SECONDS; nice -n 5 "$@"; echo "[real_gate_two_eps.sh] ${*: -1} took $((SECONDS - t0)) s"; }
case ${1:?usage: real_gate_two_eps.sh fit | val | test} in
  fit) $PY train/gate.py $R/selfjudge --quantile 0.5 --typical-epsilon 0.3 --typical-end strict \
           --relaxed-epsilon 0.03 --inputs hidden --out $R/gate/$NAME ;;
  val) timed $PY eval/run.py "${COMMON[@]}" "data.holdout=[{n:64,seed:11}]" task.data.seed=13 seed=14 \
           "out_dir='$R/val_gate/diversed($NAME)'" ;;
  test) timed $PY eval/run.py "${COMMON[@]}" task.data.seed=11 seed=12 "out_dir='$R/t1_n64/diversed($NAME)'" ;;
  *) echo "real_gate_two_eps.sh: STEP is fit, val or test" >&2; exit 2 ;;
esac

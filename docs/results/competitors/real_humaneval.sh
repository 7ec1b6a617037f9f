#!/usr/bin/env bash
# Issue "the real pair at scale" §3, code: all 164 HumanEval problems (never trained on), the real pair (Qwen2.5-Coder
# 1.5B target, 0.5B draft, bf16), T = 1, γ = 4, batch 8, one thread, decoding seed 12, 512 new tokens (the task's 300
# cut 2 of the first 8 SD answers: its config asks real models for 512).
# Fixed before any result, in this order (one directory; a kill loses at most the batch in flight):
#   rules: sd, static w = 0 (the 0.5B alone) and 0.5, typical ε = 0.3 and cascade t = 0.02 (the two best rules of the
#          real MBPP test table, run_real.sh);
#   head:  an MBPP head real_head.sh shipped (its selected.json), as "selected(head_VARIANT)". VARIANT (the second
#          argument) is typical, the truncating head real_head.sh ... typical chose on validation (written before its
#          HumanEval run; it ships typical's ν-form, 0.625 on the MBPP test against head_flip's SD-level 0.406), or flip.
# Resumable (rerun the same command). Usage: bash docs/results/competitors/real_humaneval.sh [rules | head | all] [typical | flip]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
PY=.venv/bin/python
STEP=${1:-all}
VARIANT=${2:-typical}
R=runs/competitors/real_humaneval/t1_n164
COMMON=(task=humaneval model=qwen25coder_15b_05b temperature=1.0 seed=12 eval.num_samples=164 eval.batch_size=8
        eval.max_new_tokens=512 num_threads=1 task.reward_opts.max_workers=1 eval.progress=false resume=true)
timed() { local t0=$SECONDS; nice -n 5 "$@"; echo "[real_humaneval.sh] $STEP took $((SECONDS - t0)) s"; }
if [[ $STEP == all || $STEP == rules ]]; then
  timed $PY eval/frontier.py "${COMMON[@]}" out_dir=$R 'frontier.baselines=[sd]' 'frontier.grid=[0.0,0.5]' \
      'frontier.sweep_methods=[typical,cascade]' 'frontier.sweeps.typical.epsilon=[0.3]' \
      'frontier.sweeps.cascade.threshold=[0.02]'
fi
if [[ $STEP == all || $STEP == head ]]; then
  SEL=runs/competitors/real_mbpp/head_$VARIANT/selected.json
  HEAD=$($PY -c "import json; print(json.load(open('$SEL'))['best']['head'])")
  timed $PY eval/run.py "${COMMON[@]}" method=diversed head=$HEAD "out_dir='$R/selected(head_$VARIANT)'"
  $PY eval/pool.py $R --ref "selected(head_$VARIANT)"
fi

#!/usr/bin/env bash
# An EAGLE-style feature drafter for the real pair's target (Qwen2.5-Coder-1.5B-Instruct), distilled on MBPP, then
# measured against the 0.5B draft LM and vanilla CD (issue 13) on 16 held-out MBPP problems.
# Data: the 1.5B's own T=1 answers to 96 MBPP problems disjoint from the 16 evaluated (data.holdout), ended at the
# closed code block as evaluation ends them. Drafter: one decoder layer (SwiGLU width 2048) over the target's last
# hidden state, the target's embeddings and LM head frozen, an 8192-token draft vocabulary (EAGLE3); the target's
# features and log-probs computed once (train.cache_teacher). Resumable: rerun the same line.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
RUN=${RUN:-runs/real/drafter_mbpp}
THREADS=${THREADS:-2}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
t0=$SECONDS
[ -f $RUN/drafter/config.json ] || nice -n 2 $PY train/drafter.py model=qwen25coder_15b_05b task=mbpp \
  data.path=../shared/data/mbpp/sanitized-mbpp.json 'data.holdout={n:16,seed:0}' data.n_train=96 \
  samples.max_new_tokens=160 samples.batch_size=16 drafter.mlp=2048 drafter.draft_vocab=8192 \
  train.cache_teacher=true train.batch_size=8 train.unroll=2 train.steps=${STEPS:-200} checkpoint.every=20 \
  num_threads=$THREADS logger=disabled progress=false resume=true hydra.run.dir=$RUN
echo "[run.sh] drafter took $((SECONDS - t0)) s"; t0=$SECONDS
nice -n 2 $PY bench/feature_drafter.py --model qwen25coder_15b_05b --drafter $RUN/drafter --tasks mbpp \
  --data-path ../shared/data/mbpp/sanitized-mbpp.json --n ${N:-2} --n-robust ${N_ROBUST:-8} \
  --new-tokens ${NEW:-64} --threads $THREADS --out docs/results/real_drafter
echo "[run.sh] bench took $((SECONDS - t0)) s"

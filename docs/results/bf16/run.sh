#!/usr/bin/env bash
# bfloat16 against float32 on the real pair (Qwen2.5-Coder 1.5B target, 0.5B draft), the same prompts and seeds:
# sd and static w = 0.5 on 32 real MBPP problems, T = 1, gamma = 4, batch 8, 128 new tokens, one thread. Each dtype
# is one eval/frontier.py process under /usr/bin/time -v (peak memory). Resumable: rerun the same command.
# Needs `make real-models`. Usage: bash docs/results/bf16/run.sh [N] [DTYPES]
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${1:-32}
DTYPES=${2:-"bfloat16 float32"}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for DT in $DTYPES; do
  OUT=runs/bf16/mbpp_n${N}_${DT}
  mkdir -p "$OUT"
  t0=$SECONDS
  nice -n 5 /usr/bin/time -v -o "$OUT/time.txt" .venv/bin/python eval/frontier.py task=mbpp \
      model=qwen25coder_15b_05b model.dtype=$DT data.path=../shared/data/mbpp/sanitized-mbpp.json \
      eval.num_samples=$N eval.max_new_tokens=128 eval.batch_size=8 temperature=1.0 seed=0 num_threads=1 \
      resume=true out_dir=$OUT task.reward_opts.max_workers=1 'frontier.baselines=[sd]' 'frontier.grid=[0.5]'
  echo "[bf16/run.sh] $DT took $((SECONDS - t0)) s; peak RSS $(grep 'Maximum resident' "$OUT/time.txt")"
done

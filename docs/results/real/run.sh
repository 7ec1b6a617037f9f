#!/usr/bin/env bash
# The real-pair MBPP frontier (Qwen2.5-Coder 1.5B target, 0.5B draft), T=1, gamma=4, batch 8, one CPU thread.
# Resumable: every method writes <OUT>/<label>/samples.jsonl as batches finish; rerun the same command to continue.
# Needs `make real-models` first. Usage: bash docs/results/real/run.sh [N] [MAX_NEW]
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${1:-16}
MAX_NEW=${2:-128}
OUT=runs/real/mbpp_t1_n${N}_m${MAX_NEW}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
COMMON=(task=mbpp model=qwen25coder_15b_05b data.path=../shared/data/mbpp/sanitized-mbpp.json
        eval.num_samples=$N eval.max_new_tokens=$MAX_NEW eval.batch_size=8 temperature=1.0 seed=0
        num_threads=1 resume=true out_dir=$OUT task.reward_opts.max_workers=1)
run() { local t0=$SECONDS; nice -n 5 .venv/bin/python eval/frontier.py "${COMMON[@]}" "$@";
        echo "[run.sh] $* took $((SECONDS - t0)) s"; }
run 'frontier.baselines=[sd]' 'frontier.grid=[0.0,0.5,0.85]'
run 'frontier.baselines=[lossy,cascade]' 'frontier.grid=[]'
t0=$SECONDS; nice -n 5 .venv/bin/python docs/results/real/greedy_check.py 2 64 | tee "$OUT/greedy_check.json"
echo "[run.sh] greedy check took $((SECONDS - t0)) s"
run 'frontier.baselines=[]' 'frontier.grid=[0.25,0.7,0.95]'
run 'frontier.baselines=[ar_target]' 'frontier.grid=[]'

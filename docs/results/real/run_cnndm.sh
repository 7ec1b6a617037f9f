#!/usr/bin/env bash
# The real-pair CNN/DM frontier (Qwen2.5-Coder 1.5B target, 0.5B draft), T=1, gamma=4, batch 8, real CNN/DM rows
# from ../shared/data (seed 0), the plain instruction ("Summarize the article in three sentences.") as the chat
# user message, ROUGE-2 F1 against the highlights (the task's reward). Articles are ~800 tokens, so the prefill is a
# large part of the time here. Resumable like run.sh (rerun the same command). Needs `make real-models`.
# Usage: bash run_cnndm.sh [N] [MAX_NEW]
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${1:-16}
MAX_NEW=${2:-128}
OUT=runs/real/cnndm_t1_n${N}_m${MAX_NEW}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
COMMON=(task=cnndm model=qwen25coder_15b_05b data.path=../shared/data/cnn_dailymail/sample.jsonl
        eval.num_samples=$N eval.max_new_tokens=$MAX_NEW eval.batch_size=8 temperature=1.0 seed=0
        num_threads=${THREADS:-2} resume=true out_dir=$OUT)
run() { local t0=$SECONDS; nice -n 5 .venv/bin/python eval/frontier.py "${COMMON[@]}" "$@";
        echo "[run_cnndm.sh] $* took $((SECONDS - t0)) s"; }
# Run on 2026-12-01: sd 1312 s, w=0 1045 s, w=0.5 1226 s of decoding (+ ~5 min loading). w=0.85 was stopped at its
# start and the second line not run: w=0 already matched sd's ROUGE at acceptance 1 (docs/results/real/README.md),
# and the CPU went to the GSM8K head's third evaluation set. Rerun as is to add them (resume skips finished methods).
run 'frontier.baselines=[sd]' 'frontier.grid=[0.0,0.5,0.85]'
run 'frontier.baselines=[]' 'frontier.grid=[0.25,0.7,0.95]'
# The baselines of issue 10 section 2 (session 11: ar_target on 1 thread beside the GSM8K job, lossy and cascade
# on 2 threads alone; two fp32 real-pair processes (~11 GB each) do not fit beside each other for long in 24 GiB).
run 'frontier.baselines=[ar_target,lossy,cascade]' 'frontier.grid=[]'
# tables and picture of docs/results/real/cnndm/
.venv/bin/python eval/frontier.py task=cnndm "frontier.from_dirs=[$OUT]" out_dir=docs/results/real/cnndm
.venv/bin/python eval/pool.py $OUT --ref sd > docs/results/real/cnndm/pool.md

#!/usr/bin/env bash
# The real-pair GSM8K frontier (Qwen2.5-Coder 1.5B target, 0.5B draft), T=1, gamma=4, batch 8, real GSM8K test rows
# (seed 0), the chat prompt that asks for a short solution ending "#### <number>" (data/tasks.py: _gsm8k_chat).
# Resumable like run.sh (rerun the same command). Needs `make real-models`. Usage: bash run_gsm8k.sh [N] [MAX_NEW]
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${1:-16}
MAX_NEW=${2:-320}
OUT=runs/real/gsm8k_t1_n${N}_m${MAX_NEW}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
COMMON=(task=gsm8k model=qwen25coder_15b_05b data.path=../shared/data/gsm8k/test.jsonl
        eval.num_samples=$N eval.max_new_tokens=$MAX_NEW eval.batch_size=8 temperature=1.0 seed=0
        num_threads=${THREADS:-1} resume=true out_dir=$OUT)
run() { local t0=$SECONDS; nice -n 5 .venv/bin/python eval/frontier.py "${COMMON[@]}" "$@";
        echo "[run_gsm8k.sh] $* took $((SECONDS - t0)) s"; }
run 'frontier.baselines=[sd]' 'frontier.grid=[0.0,0.5,0.85]'
run 'frontier.baselines=[]' 'frontier.grid=[0.25,0.7,0.95]'
# The baselines of issue 10 section 2 (session 11: ar_target on 1 thread beside the CNN/DM job, lossy and cascade
# on 2 threads alone; two fp32 real-pair processes (~11 GB each) do not fit beside each other for long in 24 GiB).
run 'frontier.baselines=[ar_target,lossy,cascade]' 'frontier.grid=[]'
# The digit oracle of issue 10 section 2 at one w0 (session 11; 638 s of decoding on 2 threads); its table is
# docs/results/real/gsm8k/baselines/oracle.md.
# The same settings as the frontier (COMMON; the oracle writes under --out and ignores out_dir).
nice -n 5 .venv/bin/python diagnostics/oracle_head.py "${COMMON[@]}" --no-sd --static '' --w0 0.5 \
    --out runs/real/gsm8k_oracle_n${N}_m${MAX_NEW}

#!/bin/bash
# Paired static points on the lam3_init095_unit head's rows (sets 1-2): w = 0.85, then 0.95, then sd. Each call lists
# every method so far; finished ones are resumed from their run directories, so frontier.md holds them all.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
PY=.venv/bin/python
RUN=runs/real/head_gsm8k_lam3_init095_unit
O=runs/real/lam3_init095_unit
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
EVAL=(task=gsm8k model=qwen25coder_15b_05b data.path=../shared/data/gsm8k/test.jsonl
      eval.num_samples=16 eval.max_new_tokens=320 eval.batch_size=8 temperature=1.0 num_threads=2 resume=true)
S1=(task.data.seed=0 seed=0 out_dir=$O/set1)
S2=(task.data.seed=7 seed=1 out_dir=$O/set2)
go() { echo "== $(date -u +%T) $*"; nice -n 2 $PY eval/frontier.py "${EVAL[@]}" "$@" "heads=[$RUN/head]"; }
go "${S1[@]}" 'frontier.baselines=[]' 'frontier.grid=[0.85]'
go "${S2[@]}" 'frontier.baselines=[]' 'frontier.grid=[0.85]'
go "${S1[@]}" 'frontier.baselines=[]' 'frontier.grid=[0.85,0.95]'
go "${S2[@]}" 'frontier.baselines=[]' 'frontier.grid=[0.85,0.95]'
go "${S1[@]}" 'frontier.baselines=[sd]' 'frontier.grid=[0.85,0.95]'
go "${S2[@]}" 'frontier.baselines=[sd]' 'frontier.grid=[0.85,0.95]'
echo "== $(date -u +%T) done"

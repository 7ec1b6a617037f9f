#!/usr/bin/env bash
# A second, independent timed run of the second table's key cells (run_slim.sh ran one timed run per cell on a machine
# whose step cost drifts): ar_target, sd, cascade t = 0.1 and Fuzzy SD (KL) T = 4, and the same three with the slim
# draft. Every other setting as run_slim.sh (4 MBPP test problems, data seed 11, --rotate 4, bf16, one thread, batch
# 1, T = 1, γ = 4, 96 new tokens, int8 + 32,768 counted ids). Fixed before its result. Run it with the second core
# idle. Usage: bash docs/results/real_speed/run_slim_repeat.sh [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
M=artifacts/models
OUT=${1:-docs/results/real_speed/slim/repeat.json}
mkdir -p "$(dirname "$OUT")"
.venv/bin/python bench/gpu.py --device cpu --dtype bfloat16 --threads 1 --target $M/qwen25coder_15b \
  --draft $M/qwen25coder_05b --task mbpp --data-path ../shared/data/mbpp/sanitized-mbpp.json --n-prompts 4 \
  --data-seed 11 --rotate 4 --methods ar_target sd cascade fsd --slim-methods sd cascade fsd --draft-int8 \
  --draft-vocab 32768 --batch-sizes 1 --new-tokens 96 --repeats 1 --temperature 1.0 --out "$OUT" | tee "${OUT%.json}.md"

#!/usr/bin/env bash
# The key cells again with the draft's activations quantized too (specdec.slim_draft int8="dynamic": fbgemm's
# int8 x int8 kernel, one scale per token; 32,768 counted ids as before): ar_target, sd, cascade t = 0.1, Fuzzy SD
# (KL) T = 4 and typical ε = 0.3, each with the full draft and with the dynamic slim draft. Every other setting as
# run_slim.sh (4 MBPP test problems, data seed 11, --rotate 4, bf16, one thread, batch 1, T = 1, γ = 4, 96 new
# tokens). Fixed before its result; run it several times (each is one timed run per cell), with the second core
# idle.
# Usage: bash docs/results/real_speed/run_dynamic.sh [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
M=artifacts/models
OUT=${1:-docs/results/real_speed/dynamic/run1.json}
mkdir -p "$(dirname "$OUT")"
.venv/bin/python bench/gpu.py --device cpu --dtype bfloat16 --threads 1 --target $M/qwen25coder_15b \
  --draft $M/qwen25coder_05b --task mbpp --data-path ../shared/data/mbpp/sanitized-mbpp.json --n-prompts 4 \
  --data-seed 11 --rotate 4 --methods ar_target sd cascade fsd typical --slim-methods sd cascade fsd typical \
  --draft-int8 dynamic --draft-vocab 32768 --batch-sizes 1 --new-tokens 96 --repeats 1 --temperature 1.0 \
  --out "$OUT" | tee "${OUT%.json}.md"

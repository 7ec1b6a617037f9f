#!/usr/bin/env bash
# The dynamic slim draft's cells at γ = 4, 6 and 8, after its prefill moved to torch's int8 x int8 matmul (a
# 160-token prefill of the 0.5B 1.8 -> 0.55 s): ar_target, then sd, cascade t = 0.1 and Fuzzy SD (KL) T = 4, each
# with the dynamic slim draft (32,768 counted ids) at each γ. Why γ: at c ~ 0.13 the draft is cheap enough that
# longer blocks should pay; cascade's ν-form emits ν at every position whatever γ is (the bonus too), so its score
# does not depend on γ, only its speed. Every other setting as run_dynamic.sh (4 MBPP test problems, data seed 11,
# --rotate 4, bf16, one thread, batch 1, T = 1, 96 new tokens). Fixed before its result; run it several times (each
# is one timed run per cell), with the second core idle.
# Usage: bash docs/results/real_speed/run_gamma.sh [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
M=artifacts/models
OUT=${1:-docs/results/real_speed/gamma/run1.json}
mkdir -p "$(dirname "$OUT")"
.venv/bin/python bench/gpu.py --device cpu --dtype bfloat16 --threads 1 --target $M/qwen25coder_15b \
  --draft $M/qwen25coder_05b --task mbpp --data-path ../shared/data/mbpp/sanitized-mbpp.json --n-prompts 4 \
  --data-seed 11 --rotate 4 --methods ar_target --slim-methods sd cascade fsd --gamma 4 --extra-gammas 6 8 \
  --draft-int8 dynamic --draft-vocab 32768 --batch-sizes 1 --new-tokens 96 --repeats 1 --temperature 1.0 \
  --out "$OUT" | tee "${OUT%.json}.md"

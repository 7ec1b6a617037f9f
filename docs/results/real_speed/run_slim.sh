#!/usr/bin/env bash
# Issue "the real pair at scale" §4, second speed table: the same methods with a slimmed copy of the 0.5B draft beside
# them (specdec.slim_draft: weight-only int8 linears and 32,768 kept output ids, ranked by their counts in the MBPP
# rows disjoint from the bench's prompts). The draft's step is weight bytes at batch 1; q stays a distribution, so
# every rule keeps its guarantee and only acceptance can move. Fixed before any result:
#   prompts, dtype, threads, T, γ, new tokens: as run.sh (4 MBPP test problems, data seed 11, --rotate 4, bf16, one
#            thread, batch 1, T = 1, γ = 4, 96 new tokens, one timed run per cell);
#   methods: ar_target, sd, static w = 0.5, lossy 0.5, cascade t = 0.1, Fuzzy SD (KL) T = 4, typical ε = 0.3,
#            FLy H ≥ 0.5, cd and dcd (α 0.5, β 0.1), and each of sd … FLy and dcd again with the slim draft (the
#            amateur stays the full 0.5B: it defines π_CD). No head and no feature drafter rows: neither export is
#            on this machine (the real MBPP head's shipped rule is typical ε = 0.3's ν, which the typical row times).
# Run it with the second core idle. Usage: bash docs/results/real_speed/run_slim.sh [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
M=artifacts/models
OUT=${1:-docs/results/real_speed/slim/bench.json}
mkdir -p "$(dirname "$OUT")"
.venv/bin/python bench/gpu.py --device cpu --dtype bfloat16 --threads 1 --target $M/qwen25coder_15b \
  --draft $M/qwen25coder_05b --amateur $M/qwen25coder_05b \
  --task mbpp --data-path ../shared/data/mbpp/sanitized-mbpp.json --n-prompts 4 --data-seed 11 --rotate 4 \
  --methods ar_target sd static lossy cascade fsd typical fly cd dcd \
  --slim-methods sd static lossy cascade fsd typical fly dcd --draft-int8 --draft-vocab 32768 \
  --batch-sizes 1 --new-tokens 96 --repeats 1 --temperature 1.0 --out "$OUT" | tee "${OUT%.json}.md"

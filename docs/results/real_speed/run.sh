#!/usr/bin/env bash
# Issue "the real pair at scale" §4: the first real speed-ups. The real pair (Qwen2.5-Coder 1.5B target, 0.5B draft,
# the 0.5B also the amateur) at batch 1 in bf16 on one CPU thread, the regime GPUs are in (memory-bound). Fixed before
# any result:
#   prompts: 4 MBPP test problems (a draw with run_real.sh's data seed 11), chat-formatted as evaluation formats them,
#            each decoded at batch 1 in turn in every timed run (--rotate 4), so L is over four problems, not one;
#   methods: ar_target, sd, static w = 0.5, the real MBPP head (real_head.sh mbpp ... typical: its shipped rule,
#            typical ε = 0.3 ν through the head path), lossy 0.5, cascade t = 0.1, Fuzzy SD (KL) T = 4, typical
#            ε = 0.3, FLy H ≥ 0.5, cd and dcd (α 0.5, β 0.1), sd and dcd with the feature drafter retrained on 2,093
#            of the target's answers (run_2k.sh);
#   T = 1, γ = 4, 96 new tokens per problem, one timed run per cell (~25–30 min in all on one bf16 thread).
# Run it with the second core idle (nothing else running): the ratios are only as good as the machine's quiet.
# Usage: bash docs/results/real_speed/run.sh [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
M=artifacts/models
OUT=${1:-docs/results/real_speed/bench.json}
HEAD=runs/competitors/real_mbpp/head_typical/candidates/rule/head
DRAFTER=runs/real/drafter_mbpp_2k/drafter
for need in $HEAD/config.json $DRAFTER/config.json; do
  [ -f $need ] || { echo "run_real speed: missing $need (real_head.sh mbpp ... typical; real_drafter/run_2k.sh)" >&2; exit 2; }
done
.venv/bin/python bench/gpu.py --device cpu --dtype bfloat16 --threads 1 --target $M/qwen25coder_15b \
  --draft $M/qwen25coder_05b --amateur $M/qwen25coder_05b --head $HEAD --drafter $DRAFTER \
  --task mbpp --data-path ../shared/data/mbpp/sanitized-mbpp.json --n-prompts 4 --data-seed 11 --rotate 4 \
  --methods ar_target sd static head lossy cascade fsd typical fly cd dcd sd_feature dcd_feature \
  --batch-sizes 1 --new-tokens 96 --repeats 1 --temperature 1.0 --out "$OUT" | tee "${OUT%.json}.md"

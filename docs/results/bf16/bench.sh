#!/usr/bin/env bash
# Speed of the real pair in bfloat16 and float32 on this CPU, one thread, the same prompts: bench/gpu.py's
# ar_target / sd / static w = 0.5 at batch 1 and 8, 64 new tokens (peak memory from /usr/bin/time), then a profile
# of sd rounds at batch 8 in each dtype (bench/profile_round.py). Needs `make real-models`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
M=artifacts/models
OUT=runs/bf16
mkdir -p $OUT
for DT in ${DTYPES:-bfloat16 float32}; do
  /usr/bin/time -v -o $OUT/bench_$DT.time .venv/bin/python bench/gpu.py --device cpu --dtype $DT --threads 1 \
      --target $M/qwen25coder_15b --draft $M/qwen25coder_05b --methods ar_target sd static \
      --batch-sizes 1 8 --new-tokens 64 --out $OUT/bench_$DT.json | tee $OUT/bench_$DT.md
  .venv/bin/python bench/profile_round.py --target $M/qwen25coder_15b --draft $M/qwen25coder_05b --dtype $DT \
      --batch 8 --new-tokens 24 --out $OUT/profile_b8_$DT.json | tee $OUT/profile_b8_$DT.md
done

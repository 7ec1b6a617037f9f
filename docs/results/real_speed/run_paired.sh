#!/usr/bin/env bash
# Two changes against the fourth table's gap between measured and modelled speed-up (run_gamma.sh, model_gap.py),
# each an honest fix of a cause found there, fixed before any result:
#  * cascade_pbonus: SpecCascade t = 0.1 with the bonus token from p (method.bonus=p). The ν-form needs the draft's
#    q at the bonus position, one more draft call per round than the model (L+1)/(γc+1) charges (7-8% of a round);
#    from p it makes γ calls, as SD. The drafts accepted are the same in law; only the bonus token moves to p.
#  * --paired-baseline: ar_target is timed again after every drafting cell, and each drafting row is also given
#    against the mean of the ar_target runs just before and after it. In the fourth table ar_target ran once, first,
#    and the machine's speed drifted by up to ±10% over the 25 minutes after it.
# Cells: ar_target, then sd, cascade (ν-form) and cascade_pbonus, each with the dynamic slim draft, at γ = 6 (the
# fourth table's best γ for cascade). Every other setting as run_gamma.sh (4 MBPP test problems, data seed 11,
# --rotate 4, bf16, one thread, batch 1, T = 1, 96 new tokens). Run it several times, with the second core idle.
# GAMMA=4: the same cells at γ = 4 (added after run 1 at γ = 6 measured the 7-token pass at 1.14 target steps,
# a cost the model (L+1)/(γc+1) does not charge; at γ = 4 the pass cost 0.94-1.10 steps in the fourth table).
# ORDER="sd cascade_pbonus cascade": the drafting cells in another order (added after cascade_pbonus, timed last,
# drew the slowest target passes of three γ = 4 runs; a probe found no effect of its 2-token draft calls on them).
# Usage: [GAMMA=4] [ORDER=...] bash docs/results/real_speed/run_paired.sh [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
M=artifacts/models
GAMMA=${GAMMA:-6}
OUT=${1:-docs/results/real_speed/paired/g${GAMMA}_run1.json}
mkdir -p "$(dirname "$OUT")"
.venv/bin/python bench/gpu.py --device cpu --dtype bfloat16 --threads 1 --target $M/qwen25coder_15b \
  --draft $M/qwen25coder_05b --task mbpp --data-path ../shared/data/mbpp/sanitized-mbpp.json --n-prompts 4 \
  --data-seed 11 --rotate 4 --methods ar_target --slim-methods ${ORDER:-sd cascade cascade_pbonus} --gamma "$GAMMA" \
  --paired-baseline --draft-int8 dynamic --draft-vocab 32768 --batch-sizes 1 --new-tokens 96 --repeats 1 \
  --temperature 1.0 --out "$OUT" | tee "${OUT%.json}.md"

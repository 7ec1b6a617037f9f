#!/usr/bin/env bash
# Issue "the real pair at scale" §3, GSM8K at N = 200: the same settings as run_real.sh's GSM8K table (data seed 11,
# decoding seed 12, T = 1, gamma 4, batch 8, bf16, one thread, 320 new tokens) on 200 problems, the same 200 for every
# method, so every pair of rows is paired. Fixed before any result at this N:
#   sd            SD
#   typical       typical acceptance eps = 0.3 (the best rule by score at N = 64: 0.375 vs SD's 0.281)
#   static        the static line w in {0.95, 0.85, 0.7, 0.5} (static_hi / static_lo: its two halves, for two cores)
#   rules         cascade t = 0.1, Fuzzy SD (KL) T = 4, lossy lenience 0.5
#   typical01     typical acceptance eps = 0.1 (added 2026-12-06, before it ran here: the real GSM8K head's
#                 validation chose it over eps = 0.3, 0.422 vs 0.359 on 64 problems disjoint from these 200)
#   fly           FLy at T = 1, entropy gate H >= 0.5 nats, window 2 (added 2026-12-06, before any T = 1 FLy result
#                 on the real pair: H >= 0.5 had the most acceptance at FLy's best score in its own setting, the real
#                 pair's T = 0 GSM8K table, 0.391 @ 0.899 vs H >= 1's 0.391 @ 0.859)
#   cascade_lo    cascade t = 0.02, cascade_hi t = 0.3: the rest of the cascade sweep that validation ran (added
#                 2026-12-06, before either ran here)
#   t0            FLy's own setting, T = 0: greedy SD and FLy at H >= 0.5 and 1.0 nats, window 2 (the N = 64 table's
#                 points, run_real.sh gsm8k t0), into t0_n$N; run with N = 100 (the issue's N >= 100 for FLy's T = 0
#                 table). Added 2026-12-06, before it ran at this N. With the same data seed, its problems are a
#                 subset of t1_n200's (one seeded draw: random.sample's first 100 of the 200).
# (the real GSM8K head joins when one is trained: real_head.sh gsm8k ...). One PART per process, so two cores run two
# parts at once; each method has its own run directory, and every part resumes (rerun the same line). Never run two
# parts that share a method at once (static with static_hi or static_lo): both would write its one run directory.
# The run directories are kept in the repository (real_gsm8k/t1_n200/<method>/: samples, batch timings, run.json;
# ~0.3 MB a method), not under runs/: a session's runs/ does not outlive it, and a table built over several sessions
# needs every method's per-prompt records to stay paired. Commit them as they finish (or at a session's end).
# Usage: bash docs/results/competitors/real_gsm8k_n200.sh PART [N]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
PART=${1:?usage: real_gsm8k_n200.sh PART [N]}
N=${2:-200}
B='frontier.baselines=[]' G='frontier.grid=[]' S='frontier.sweep_methods=[]'
TEMP=1.0 DIR=t1
case $PART in
  sd) ARGS=('frontier.baselines=[sd]' "$G" "$S") ;;
  typical) ARGS=("$B" "$G" 'frontier.sweep_methods=[typical]' 'frontier.sweeps.typical.epsilon=[0.3]') ;;
  typical01) ARGS=("$B" "$G" 'frontier.sweep_methods=[typical]' 'frontier.sweeps.typical.epsilon=[0.1]') ;;
  static) ARGS=("$B" 'frontier.grid=[0.95,0.85,0.7,0.5]' "$S") ;;
  static_hi) ARGS=("$B" 'frontier.grid=[0.95,0.85]' "$S") ;;
  static_lo) ARGS=("$B" 'frontier.grid=[0.7,0.5]' "$S") ;;
  rules) ARGS=("$B" "$G" 'frontier.sweep_methods=[cascade,fsd,lossy]' 'frontier.sweeps.cascade.threshold=[0.1]'
               'frontier.sweeps.fsd.threshold=[4.0]' 'frontier.sweeps.lossy.lenience=[0.5]') ;;
  fly) ARGS=("$B" "$G" 'frontier.sweep_methods=[fly]' 'frontier.sweeps.fly.entropy_threshold=[0.5]') ;;
  cascade_lo) ARGS=("$B" "$G" 'frontier.sweep_methods=[cascade]' 'frontier.sweeps.cascade.threshold=[0.02]') ;;
  cascade_hi) ARGS=("$B" "$G" 'frontier.sweep_methods=[cascade]' 'frontier.sweeps.cascade.threshold=[0.3]') ;;
  t0) TEMP=0 DIR=t0
      ARGS=('frontier.baselines=[sd]' "$G" 'frontier.sweep_methods=[fly]' 'frontier.sweeps.fly.entropy_threshold=[0.5,1.0]') ;;
  *) echo "real_gsm8k_n200.sh: PART is sd, typical, typical01, static, static_hi, static_lo, rules, fly, cascade_lo, cascade_hi or t0" >&2; exit 2 ;;
esac
t0=$SECONDS
nice -n 5 .venv/bin/python eval/frontier.py task=gsm8k model=qwen25coder_15b_05b data.path=../shared/data/gsm8k/test.jsonl \
  eval.max_new_tokens=320 task.data.seed=11 seed=12 eval.num_samples=$N eval.batch_size=8 num_threads=1 \
  eval.progress=false resume=true temperature=$TEMP out_dir=docs/results/competitors/real_gsm8k/${DIR}_n$N "${ARGS[@]}"
echo "[real_gsm8k_n200.sh] $PART took $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Issue "the real pair at scale" §4: what the slim draft (specdec.slim_draft; the speed table in slim/) costs in
# quality. SD stays lossless with any draft (tests/test_slim_draft.py), so only the relaxed rules can move. Fixed
# before any result: the two fastest rules of the speed table, Fuzzy SD (KL) T = 4 and typical ε = 0.3, decoded on
# the 64 real MBPP test problems of the competitors table (run_real.sh: data seed 11, decoding seed 12, T = 1,
# γ = 4, batch 8, 128 new tokens, bf16, one thread each, both at once) with model.draft_int8=true and
# model.draft_vocab = 32,768 ids counted on the 299 MBPP rows disjoint from the test and validation draws
# (data/draft_vocab.py --holdout 64:11 64:13). Paired with the same rules' full-draft records on the same problems.
# INT8=dynamic: the same with model.draft_int8=dynamic (activations int8 too; labels "+slim-dynamic"), for the rules
# RULES names (default "fsd typical"; the dynamic run decodes "cascade fsd": cascade t = 0.1 leads its speed table,
# run_dynamic.sh; fixed before any dynamic quality result). GAMMA=6: the same at γ = 6 (labels "...-g6"): cascade's
# ν-form emits ν at every position whatever γ is, so its score should move only by sampling noise (run_gamma.sh).
# RULES=cascade_p: cascade t = 0.1 with the bonus token from p (method.bonus=p; one draft call per round fewer,
# run_paired.sh), label "cascade(t=0.1,p)".
# Resumable (rerun the same line). Usage: [INT8=dynamic] [GAMMA=6] bash docs/results/real_speed/slim_quality.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
VOCAB=artifacts/vocab/mbpp_32k.json
INT8=${INT8:-true}
GAMMA=${GAMMA:-4}
TAG=slim; [ "$INT8" = true ] || TAG=slim-$INT8; [ "$GAMMA" = 4 ] || TAG=$TAG-g$GAMMA
DATA=../shared/data/mbpp/sanitized-mbpp.json
[ -f $VOCAB ] || .venv/bin/python data/draft_vocab.py --task mbpp --data-path $DATA \
  --tokenizer artifacts/models/qwen25coder_05b --holdout 64:11 64:13 --k 32768 --out $VOCAB
R=runs/competitors/real_mbpp/t1_n64_slim
mkdir -p $R
for lab in sd 'fsd(kl<=4)' 'typical(eps=0.3)' 'cascade(t=0.1)'; do  # the full-draft records, to pair with
  [ -d "$R/$lab" ] || cp -a "docs/results/competitors/real_mbpp/t1_n64/$lab" "$R/$lab"
done
COMMON=(task=mbpp model=qwen25coder_15b_05b data.path=$DATA eval.max_new_tokens=128 task.reward_opts.max_workers=1
        task.data.seed=11 seed=12 eval.num_samples=64 eval.batch_size=8 num_threads=1 eval.progress=false
        resume=true temperature=1.0 model.draft_int8=$INT8 model.draft_vocab=$VOCAB method.gamma=$GAMMA)
one() { local t0=$SECONDS; local lab=$1; shift
        nice -n 5 .venv/bin/python eval/run.py "${COMMON[@]}" "$@" "hydra.run.dir='$R/$lab'" > "$R/$lab.log" 2>&1
        echo "[slim_quality.sh] $lab took $((SECONDS - t0)) s"; }
label() { case $1 in
  fsd) echo "fsd(kl<=4)" ;; typical) echo "typical(eps=0.3)" ;; cascade) echo "cascade(t=0.1)" ;;
  cascade_p) echo "cascade(t=0.1,p)" ;;
  *) echo "slim_quality.sh: RULES holds fsd, typical, cascade or cascade_p" >&2; exit 2 ;; esac; }
for rule in ${RULES:-fsd typical}; do
  lab="$(label "$rule")+$TAG"
  case $rule in
    fsd) one "$lab" method=fsd method.threshold=4.0 & ;;
    typical) one "$lab" method=typical method.epsilon=0.3 & ;;
    cascade) one "$lab" method=cascade method.threshold=0.1 & ;;
    cascade_p) one "$lab" method=cascade method.threshold=0.1 method.bonus=p & ;;
  esac
done
wait
for rule in ${RULES:-fsd typical}; do
  .venv/bin/python eval/pool.py $R --ref "$(label "$rule")+$TAG" > "$R/pool_vs_${rule}_$TAG.md"
done

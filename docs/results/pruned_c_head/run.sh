#!/usr/bin/env bash
# The style-c pruned trio (docs/results/calibration.md, "A trio that disagrees like the real pair"): built and
# measured against the real pair first (TV profile, SD acceptance, static grid), then heads trained and evaluated on
# 300 held-out prompts (eval seed 1; heads on the train split, seed 0 unless said). Stages resume where they can.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
DIR=${DIR:-artifacts/models/tiny_pruned1500c}
OUT=${OUT:-runs/cand/head1500c}
# 0. the trio: the kept target/amateur/tokenizer plus a draft pruned from the target, trained 1500 steps on the
#    style-c corpus (only the draft trains; ~8 min)
if [ ! -f "$DIR/draft/DONE" ]; then
  mkdir -p "$DIR"; cp -rn artifacts/models/tiny/{target,amateur,tokenizer} "$DIR"/
  $PY -m data.build_models --recipe pruned --draft-steps 1500 --draft-style c --out "$DIR" --threads 1
fi
# 1. measured before any head: where the draft disagrees, and the static grid (200 prompts)
$PY diagnostics/const_head.py $DIR/target $DIR/draft runs/const_heads/tiny_pruned1500c
$PY diagnostics/head_report.py task=gsm8k model.dir=$DIR head=runs/const_heads/tiny_pruned1500c --n 60 seed=1 \
  --out runs/tv_profile/tiny_pruned1500c
$PY diagnostics/oracle_head.py task=gsm8k model.dir=$DIR eval.num_samples=200 eval.batch_size=50 seed=1 \
  --static 0.95,0.85,0.7,0.5,0.0 --w0 0.5 --out runs/cand/tiny_pruned1500c/oracle
# 2. GSM8K: the static line and sd on 300 held-out prompts; heads at lambda 3 (two training seeds), 10 and 0.1
$PY eval/frontier.py task=gsm8k model.dir=$DIR seed=1 eval.num_samples=300 eval.progress=false resume=true \
  out_dir=$OUT/frontier 'frontier.grid=[0.0,0.5,0.7,0.85,0.95]' 'frontier.baselines=[sd]'
for run in "lam3 3.0 0" "lam3_s2 3.0 2" "lam10 10.0 0" "lam0.1 0.1 0"; do
  set -- $run
  [ -f $OUT/head_returns_$1/head/config.json ] || $PY train/run.py task=gsm8k lambda=$2 seed=$3 model.dir=$DIR \
    logger=disabled progress=false hydra.run.dir=$OUT/head_returns_$1
done
$PY eval/frontier.py task=gsm8k model.dir=$DIR seed=1 eval.num_samples=300 eval.progress=false resume=true \
  out_dir=$OUT/frontier 'frontier.grid=[]' 'frontier.baselines=[]' "heads=[$OUT/head_returns_lam3/head]"
for h in lam3_s2 lam10 lam0.1; do
  $PY eval/run.py task=gsm8k model.dir=$DIR method=diversed head=$OUT/head_returns_$h/head seed=1 \
    eval.num_samples=300 eval.progress=false resume=true out_dir=$OUT/eval_$h
done
$PY eval/pool.py $OUT/frontier                     # paired differences and the static line at the head's acceptance
# 3. CNN/DM: sd, three static weights and a lambda = 3 head on 300 held-out articles
C=${C:-runs/cand/cnndm1500c}
$PY eval/frontier.py task=cnndm model.dir=$DIR seed=1 eval.num_samples=300 eval.progress=false resume=true \
  out_dir=$C/frontier 'frontier.grid=[0.0,0.5,0.85]' 'frontier.baselines=[sd]'
[ -f $C/head_returns_lam3/head/config.json ] || $PY train/run.py task=cnndm lambda=3.0 model.dir=$DIR \
  logger=disabled progress=false hydra.run.dir=$C/head_returns_lam3
$PY eval/frontier.py task=cnndm model.dir=$DIR seed=1 eval.num_samples=300 eval.progress=false resume=true \
  out_dir=$C/frontier 'frontier.grid=[]' 'frontier.baselines=[]' "heads=[$C/head_returns_lam3/head]"
$PY eval/pool.py $C/frontier

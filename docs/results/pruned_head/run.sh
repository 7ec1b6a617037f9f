#!/usr/bin/env bash
# The head against static ensembles and SD on the *pruned-draft* trio (draft cut out of the target, 1500 steps;
# docs/results/calibration.md), GSM8K synthetic, T=1, gamma=4; heads trained on the train split (seed 0),
# evaluated on 300 held-out test prompts (eval seed 1). Stages resume where they can.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
DIR=${DIR:-artifacts/models/tiny_pruned1500}
OUT=${OUT:-runs/pruned1500}
N=${N:-300}
mkdir -p "$OUT"
# 0. the trio: the kept target/amateur/tokenizer plus a draft pruned from the target (only the draft trains)
if [ ! -f "$DIR/draft/DONE" ]; then
  mkdir -p "$DIR"; cp -rn artifacts/models/tiny/{target,amateur,tokenizer} "$DIR"/
  $PY -m data.build_models --recipe pruned --draft-steps 1500 --out "$DIR" --threads 1
fi
# 1. the user's command on this trio (advantage=returns, the default), and the forks estimator at equal decoded tokens
[ -f $OUT/head_returns_lam0.1/head/config.json ] || $PY train/run.py task=gsm8k lambda=0.1 model.dir=$DIR \
  logger=disabled progress=false hydra.run.dir=$OUT/head_returns_lam0.1
BUDGET=$(tail -1 $OUT/head_returns_lam0.1/metrics.jsonl | $PY -c "import json,sys;print(json.load(sys.stdin)['decoded_tokens'])")
[ -f $OUT/head_forks_lam0.1/head/config.json ] || $PY train/run.py task=gsm8k lambda=0.1 model.dir=$DIR \
  algo.advantage=forks algo.forks.continuation=greedy_target train.steps=100000 train.max_decoded_tokens=$BUDGET \
  logger=disabled progress=false hydra.run.dir=$OUT/head_forks_lam0.1
for lam in ${LAMS:-1.0 3.0}; do  # the returns head over lambda (per token)
  [ -f $OUT/head_returns_lam${lam%.0}/head/config.json ] || $PY train/run.py task=gsm8k lambda=$lam model.dir=$DIR \
    logger=disabled progress=false hydra.run.dir=$OUT/head_returns_lam${lam%.0}
done
[ -f $OUT/head_returns_lam3_s2/head/config.json ] || $PY train/run.py task=gsm8k lambda=3.0 seed=2 model.dir=$DIR \
  logger=disabled progress=false hydra.run.dir=$OUT/head_returns_lam3_s2   # a second training seed at lambda 3
# the head classes and lambdas added later: a features-only head (the real-pair head's class,
# docs/results/real_head) and lambda 10 (where the head's curve goes past lambda 3)
[ -f $OUT/head_returns_lam3_feat/head/config.json ] || $PY train/run.py task=gsm8k lambda=3.0 head.use_hidden=false \
  model.dir=$DIR logger=disabled progress=false hydra.run.dir=$OUT/head_returns_lam3_feat
[ -f $OUT/head_returns_lam10/head/config.json ] || $PY train/run.py task=gsm8k lambda=10.0 model.dir=$DIR \
  logger=disabled progress=false hydra.run.dir=$OUT/head_returns_lam10
[ -f $OUT/head_returns_lam10_s2/head/config.json ] || $PY train/run.py task=gsm8k lambda=10.0 seed=2 model.dir=$DIR \
  logger=disabled progress=false hydra.run.dir=$OUT/head_returns_lam10_s2   # a second training seed at lambda 10
# 2. static sweep, baselines, the heads and AutoJudge on the same held-out prompts
$PY eval/frontier.py task=gsm8k model.dir=$DIR seed=1 eval.num_samples=$N eval.progress=false resume=true \
  out_dir=$OUT/frontier 'frontier.grid=[0.0,0.5,0.7,0.85,0.95]' 'frontier.baselines=[sd,ar_target]' \
  "heads=[$OUT/head_returns_lam0.1/head,$OUT/head_forks_lam0.1/head,$OUT/head_returns_lam1/head,$OUT/head_returns_lam3/head,\
$OUT/head_returns_lam3_feat/head,$OUT/head_returns_lam10/head]"
[ -f $OUT/autojudge/head/config.json ] || $PY train/autojudge.py task=gsm8k model.dir=$DIR mine.prompts=400 \
  hydra.run.dir=$OUT/autojudge
$PY eval/run.py task=gsm8k model.dir=$DIR method=autojudge head=$OUT/autojudge/head seed=1 eval.num_samples=$N \
  eval.progress=false resume=true out_dir=$OUT/autojudge_eval
$PY eval/frontier.py task=gsm8k model.dir=$DIR seed=1 eval.num_samples=$N eval.progress=false resume=true \
  out_dir=$OUT/frontier_s2 'frontier.grid=[]' 'frontier.baselines=[]' "heads=[$OUT/head_returns_lam3_s2/head,$OUT/head_returns_lam10_s2/head]"
# 3. one table and one picture from all of it
$PY eval/frontier.py "frontier.from_dirs=[$OUT/frontier,$OUT/autojudge_eval]" out_dir=docs/results/pruned_head
# 4. MBPP (synthetic) on the same trio: heads at lambda 3 and 10 against SD and the static sweep
for lam in 3.0 10.0; do
  [ -f $OUT/mbpp_head_lam${lam%.0}/head/config.json ] || $PY train/run.py task=mbpp lambda=$lam model.dir=$DIR \
    task.reward_opts.max_workers=1 logger=disabled progress=false hydra.run.dir=$OUT/mbpp_head_lam${lam%.0}
done
$PY eval/frontier.py task=mbpp model.dir=$DIR seed=1 eval.num_samples=$N eval.progress=false resume=true \
  task.reward_opts.max_workers=2 out_dir=$OUT/mbpp_frontier 'frontier.grid=[0.0,0.5,0.7,0.85,0.95]' \
  'frontier.baselines=[sd]' "heads=[$OUT/mbpp_head_lam3/head,$OUT/mbpp_head_lam10/head]"
cp $OUT/mbpp_frontier/frontier.md $OUT/mbpp_frontier/quality_vs_acceptance.png docs/results/pruned_head/mbpp/
# 5. CNN/DM (ROUGE) on the same trio: heads at lambda 3 and 1 against SD and the static sweep
for lam in 3.0 1.0; do
  [ -f $OUT/cnndm_head_lam${lam%.0}/head/config.json ] || $PY train/run.py task=cnndm lambda=$lam model.dir=$DIR \
    logger=disabled progress=false hydra.run.dir=$OUT/cnndm_head_lam${lam%.0}
done
$PY eval/frontier.py task=cnndm model.dir=$DIR seed=1 eval.num_samples=$N eval.progress=false resume=true \
  out_dir=$OUT/cnndm_frontier 'frontier.grid=[0.0,0.5,0.7,0.85,0.95]' 'frontier.baselines=[sd]' \
  "heads=[$OUT/cnndm_head_lam3/head,$OUT/cnndm_head_lam1/head]"
cp $OUT/cnndm_frontier/frontier.md $OUT/cnndm_frontier/quality_vs_acceptance.png docs/results/pruned_head/cnndm/

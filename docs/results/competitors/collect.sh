#!/usr/bin/env bash
# Copy one task's results from runs/competitors/TASK into docs/results/competitors/TASK: the test frontier of every
# run there (table + picture, regenerated from the run directories), each head's paired differences and its gap to
# the rule envelope (eval/pool.py --ref), the validation tables of the start and checkpoint choices, the summaries.
# Usage: bash docs/results/competitors/collect.sh TASK   (or real_mbpp / real_gsm8k: run_real.sh's tables)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 WANDB_MODE=disabled
PY=.venv/bin/python
TASK=${1:?usage: collect.sh TASK}
R=runs/competitors/$TASK
D=docs/results/competitors/$TASK
mkdir -p $D
if [[ $TASK == real_* ]]; then  # the real pair (run_real.sh): each temperature's directory, paired against SD
  for d in $R/t*_n*; do
    [ -f $d/frontier.md ] && cp $d/frontier.md $D/$(basename $d | cut -d_ -f1)_frontier.md
    $PY eval/pool.py $d --ref sd > $D/$(basename $d | cut -d_ -f1)_pool.md 2>/dev/null || true
    for h in "$d"/selected*; do  # real_head.sh's heads against the rule envelope (head_flip: _pool_vs_head.md)
      [ -f "$h/metrics.json" ] || continue
      run=$(basename "$h" | sed 's/^selected(\(.*\))$/\1/')
      suffix=$([[ $run == head_flip ]] && echo head || echo $run)
      $PY eval/pool.py $d --ref "$(basename "$h")" > $D/$(basename $d | cut -d_ -f1)_pool_vs_$suffix.md
    done
  done
  # real_head.sh: the validation sweep behind the start, the start's choice, the heads' validation and the choice
  if [ -d $R/val_a ]; then
    VALS=$(ls -d $R/val_a $R/val_b $R/val_c $R/val_d 2>/dev/null | paste -sd, -)
    $PY eval/frontier.py "frontier.from_dirs=[$VALS]" out_dir=$R/val_replot > /dev/null 2>&1
    cp $R/val_replot/frontier.md $D/val_frontier.md
  fi
  [ -f $R/choice.json ] && cp $R/choice.json $D/choice.json
  for c in $R/choice_typical*.json; do [ -f $c ] && cp $c $D/; done
  for run in $R/head_*; do
    name=$(basename $run)
    [ -f $run/summary.json ] && cp $run/summary.json $D/${name}_summary.json
    [ -f $run/selected.json ] && cp $run/selected.json $D/${name}_selected.json
    [ -f $run/metrics.jsonl ] && $PY train/plot_metrics.py $run --out $D/${name}_training.png > /dev/null 2>&1 || true
  done
  ls $D; exit 0
fi
$PY eval/frontier.py "frontier.from_dirs=[$R/test]" out_dir=$R/replot > /dev/null 2>&1
cp $R/replot/frontier.md $D/test_frontier.md; cp $R/replot/quality_vs_acceptance.png $D/quality_vs_acceptance.png
[ -d $R/val ] && cp $R/val/frontier.md $D/val_frontier.md && cp $R/val/choice.json $D/choice.json
for c in $R/val/choice_typical*.json; do [ -f $c ] && cp $c $D/; done  # typical_head.sh / typical_nu_val.sh
[ -d $R/val ] && $PY eval/frontier.py "frontier.from_dirs=[$R/val]" out_dir=$R/val_replot > /dev/null 2>&1 &&
    cp $R/val_replot/frontier.md $D/val_frontier.md  # every validation rule, the ν-forms run by eval/run.py included
for h in $R/test/diversed* $R/test/selected* $R/test/typical_flip* $R/test/typical_wide_flip* $R/test/typical_end*; do
  [ -f "$h/metrics.json" ] || continue
  lab=$(basename "$h")
  $PY eval/pool.py $R/test --ref "$lab" > "$D/pool_vs_$(echo "$lab" | sed 's/λ/lam/g; s/[^A-Za-z0-9._=-]/_/g').md"
done
for run in $R/head_*; do
  name=$(basename $run)
  [ -f $run/summary.json ] && cp $run/summary.json $D/${name}_summary.json
  [ -f $run/selected.json ] && cp $run/selected.json $D/${name}_selected.json
  [ -f $run/choice.json ] && cp $run/choice.json $D/${name}_choice.json  # typical_lambda_sweep.sh's start at its λ
done
[ -d $R/test_T0 ] && $PY eval/pool.py $R/test_T0 > $D/pool_T0.md && cp $R/test_T0/frontier.md $D/test_T0_frontier.md
ls $D

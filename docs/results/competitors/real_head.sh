#!/usr/bin/env bash
# Issues "strongest competitors" and "the real pair at scale" §2: a head on the real pair (Qwen2.5-Coder 1.5B target,
# 0.5B draft, bf16), chosen on validation before the test set sees it. Fixed before any result:
#   test        = run_real.sh's 64 problems (data seed 11, decoding seed 12; the rule table already measured there);
#                 for GSM8K real_gsm8k_n200.sh's 200 (see below);
#   validation  = 64 other problems (data.holdout = the test's draw; data seed 13, decoding seed 14);
#   training    = every remaining problem (data.holdout = [test, validation]).
#   val_a/val_b: sd, static w = 0 and the cascade (t = 0.02, 0.1, 0.3) on validation, split over the two cores;
#   choose:      eval/choose_start.py picks the start by J = score + 0.1·acceptance (w = 0 is cascade t = 1);
#   train:       the user's λ = 0.1, head.init_mode=flip from that start (the rule's decision, flipped with a learned
#                probability that starts at 0.02), features only (head.use_hidden=false), 8 prompts per step,
#                lr 0.03 (10x the default: the budget allows ~30 steps where the trio's runs take 200), 45 minutes of
#                steps on one thread, a checkpoint every 12 steps; resumable. (Changed after the first attempt, with
#                the hidden states and before any evaluation of it: Adam moves each of the 896 + 1536 hidden weights
#                by ~lr in its first step, so the logit moved by ~lr·Σ|h| ≈ 50, w saturated at 1 after one step and
#                the gradient died (1e-11); kept in head_flip_hidden_lr03_collapsed.)
#   select_a/select_b, then select: eval/choose_head.py ships the rule, the start or a checkpoint by validation J
#                (λ = 0.1), the candidates evaluated on the validation problems in two halves, one per core;
#                (MBPP's heads were chosen by the plain arg-max, and the paired gate that became choose_head.py's
#                default ships the same rule for both; GSM8K's head, chosen after, gets the gate);
#   test:        the shipped head on the test problems, beside every rule of run_real.sh (eval/pool.py --ref).
# VARIANT typical (added after the first head shipped SD while typical acceptance set the envelope, +14 over SD on
# validation; fixed before its results): the start is chosen over val_a, val_b *and* val_c (typical ε = 0.3, 0.1),
# so a typical start trains a truncating head (target.typical_epsilon, w = 0 is typical acceptance); every other
# setting as above, in head_typical/, choice_typical.json, val_heads_typical_{a,b} and "selected(head_typical)"; the
# test step also decodes the start's own rule, typical acceptance's ν-form (method.bonus=nu), for the envelope.
# LOOSE (added 2026-12-07 for the bar "≥ SD + 15 acceptance at SD's score", which the shipped typical ε = 0.1 head
# missed on GSM8K's test by sitting above SD's score at +10.9 acceptance; fixed before any of its runs): the same
# family's looser members, typical's ν-form (the truncating head at w ≡ 0) at ε = 0.03 and 0.01 on the validation
# problems (loose_a, loose_b: one per core, into val_e); choose_loose picks, over val_a..val_c and val_e, the
# candidate with the highest validation acceptance whose validation accuracy is ≥ SD's − 2 points
# (eval/choose_start.py --keep-score-of sd --margin 0.02; choice_loose.json); test_loose decodes that rule's ν-form on
# the 200 test problems (nothing is trained: 13 steps from ε = 0.1 found nothing the gate could see).
# (Validation then chose ε = 0.1 again, already on the test as the shipped head, so test_loose was not run. Added
# after that choice: test_eps_a / test_eps_b decode ε = 0.03 and 0.01 on the test problems anyway, one per core, as
# points of typical's ν-form sweep for the test envelope: exploratory for the bar, since validation did not pick them.)
# VAL200 (added 2026-12-07, after the exploratory test rows above showed ε = 0.03 level with ε = 0.1 where the 64
# validation problems had put it 11 points below; the candidates and the criterion are choose_loose's, unchanged, and
# the choice's test row is reported whichever it is): the same choice on 200 new validation problems (data seed 15,
# decoding seed 16; holding out the 200 test and the 64 validation problems; they overlap the shipped head's
# training problems, which does not matter for choosing among training-free rules): val200_a decodes sd then
# typical's ν-form at ε = 0.03, val200_b the ν-form at ε = 0.1 then 0.01 (one per core; records in $R/val200, kept
# in the repository, so a part cut by a session's end resumes); choose_val200 writes choice_val200.json.
# VARIANT val200 (added 2026-12-07 after choose_val200 chose typical's ν-form at ε = 0.01, before any of its runs):
# train as above from choice_val200.json, its training problems holding out the 200 validation problems too; the gate
# on those 200 (not the 64, which cannot rank this family): the rule (select_a) against the last checkpoint
# (select_b), one per core (~70 min each), so training and gate fit one session (a head's run does not outlive it);
# select then test as above, into head_val200/, val_heads_val200_{a,b} and "selected(head_val200)".
# Usage: bash docs/results/competitors/real_head.sh TASK STEP [VARIANT]   (TASK: mbpp | gsm8k; STEP as above;
# VARIANT: flip (default) | typical | val200). Resumable.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
PY=.venv/bin/python
TASK=${1:?usage: real_head.sh TASK STEP}; STEP=${2:?usage: real_head.sh TASK STEP}
# GSM8K (added before any GSM8K validation run): its test set is real_gsm8k_n200.sh's 200 problems (data seed 11;
# they contain run_real.sh's 64: a seeded draw of 64 is the first 64 of the draw of 200), so validation and training
# hold out all 200. Its records (validation runs, choices, the test row) live in the repository beside the N = 200
# table, because a session's runs/ does not outlive it; only the head's training run stays under runs/. A GSM8K step
# decodes ~2.5x MBPP's tokens (320 new, ~3.3 min a step on one thread), so its 45 minutes hold ~13 steps and it
# checkpoints every 4 (MBPP: 12 of ~69 steps) to leave validation a few candidates (added before its training).
case $TASK in
  mbpp) DATA=(data.path=../shared/data/mbpp/sanitized-mbpp.json task.reward_opts.max_workers=1); TOK=128
        NTEST=64; EVERY=12; R=runs/competitors/real_mbpp; HEADS_DIR=$R ;;
  gsm8k) DATA=(data.path=../shared/data/gsm8k/test.jsonl); TOK=320
         NTEST=200; EVERY=4; R=docs/results/competitors/real_gsm8k; HEADS_DIR=runs/competitors/real_gsm8k ;;
  *) echo "real_head.sh: TASK is mbpp or gsm8k" >&2; exit 2 ;;
esac
T=$R/t1_n$NTEST
VARIANT=${3:-flip}
case $VARIANT in
  flip) RUN=$HEADS_DIR/head_flip; CHOICE=$R/choice.json; VALS=($R/val_a $R/val_b); VH=$R/val_heads ;;
  typical) RUN=$HEADS_DIR/head_typical; CHOICE=$R/choice_typical.json; VALS=($R/val_a $R/val_b $R/val_c)
           VH=$R/val_heads_typical ;;
  val200) RUN=$HEADS_DIR/head_val200; CHOICE=$R/choice_val200.json; VALS=($R/val200); VH=$R/val_heads_val200 ;;
  *) echo "real_head.sh: VARIANT is flip, typical or val200" >&2; exit 2 ;;
esac
MODEL=(task=$TASK model=qwen25coder_15b_05b "${DATA[@]}" num_threads=1)
VAL=("${MODEL[@]}" temperature=1.0 "data.holdout=[{n:$NTEST,seed:11}]" task.data.seed=13 seed=14 eval.num_samples=64
     eval.max_new_tokens=$TOK eval.batch_size=8 eval.progress=false resume=true)
TEST=("${MODEL[@]}" temperature=1.0 task.data.seed=11 seed=12 eval.num_samples=$NTEST eval.max_new_tokens=$TOK
      eval.batch_size=8 eval.progress=false resume=true)
HELD="{n:$NTEST,seed:11},{n:64,seed:13}"  # the test's draw, then the 64 validation problems
V200=("${MODEL[@]}" temperature=1.0 "data.holdout=[$HELD]" task.data.seed=15 seed=16
      eval.num_samples=200 eval.max_new_tokens=$TOK eval.batch_size=8 eval.progress=false resume=true)
# training holds out the test and every validation draw it is chosen on (data.holdout drops them in this order)
HOLD="[$HELD]"
if [[ $VARIANT == val200 ]]; then HOLD="[$HELD,{n:200,seed:15}]"; fi
timed() { local t0=$SECONDS; nice -n 5 "$@"; echo "[real_head.sh] $TASK $STEP took $((SECONDS - t0)) s"; }
case $STEP in
  val_a) timed $PY eval/frontier.py "${VAL[@]}" out_dir=$R/val_a 'frontier.baselines=[sd]' 'frontier.grid=[0.0]' \
             'frontier.sweep_methods=[cascade]' 'frontier.sweeps.cascade.threshold=[0.3]' ;;
  val_b) timed $PY eval/frontier.py "${VAL[@]}" out_dir=$R/val_b 'frontier.baselines=[]' 'frontier.grid=[]' \
             'frontier.sweep_methods=[cascade]' 'frontier.sweeps.cascade.threshold=[0.02,0.1]' ;;
  val_c) # added after the test result (typical acceptance sets the envelope there, +17 over SD): the same rule on
         # the validation problems, to see whether that lead holds on 64 other problems
    timed $PY eval/frontier.py "${VAL[@]}" out_dir=$R/val_c 'frontier.baselines=[]' 'frontier.grid=[]' \
        'frontier.sweep_methods=[typical]' 'frontier.sweeps.typical.epsilon=[0.3,0.1]' ;;
  wide) # added after the trio's typical_wide.sh (its knob was not bracketed at ε = 0.3 there): typical's ν-form at
         # ε = 1, 0.3 and 0.1 on the validation problems (val_d) and at ε = 1 and 0.1 on the test problems (0.3 is
         # the shipped head's own rule there), then the start's choice again over val_a..val_d (choice_typical_wide)
    for EPS in 1 0.3 0.1; do
      timed $PY eval/run.py "${VAL[@]}" method=typical method.epsilon=$EPS method.bonus=nu \
          "out_dir='$R/val_d/typical(eps=$EPS,nu)'"
    done
    for EPS in 1 0.1; do
      timed $PY eval/run.py "${TEST[@]}" method=typical method.epsilon=$EPS method.bonus=nu \
          "out_dir='$T/typical(eps=$EPS,nu)'"
    done
    $PY eval/choose_start.py $R/val_a $R/val_b $R/val_c $R/val_d --lambda 0.1 --out $R/choice_typical_wide.json
    [ -f "$T/selected(head_typical)/metrics.json" ] && $PY eval/pool.py $T --ref "selected(head_typical)" ;;
  choose) $PY eval/choose_start.py "${VALS[@]}" --lambda 0.1 --out $CHOICE ;;
  loose_a|loose_b)
    EPS=$([[ $STEP == loose_a ]] && echo 0.03 || echo 0.01)
    timed $PY eval/run.py "${VAL[@]}" method=typical method.epsilon=$EPS method.bonus=nu \
        "out_dir='$R/val_e/typical(eps=$EPS,nu)'" ;;
  choose_loose) $PY eval/choose_start.py $R/val_a $R/val_b $R/val_c $R/val_e --lambda 0.1 --keep-score-of sd \
                    --margin 0.02 --out $R/choice_loose.json ;;
  test_loose)
    EPS=$($PY -c "import json; print(json.load(open('$R/choice_loose.json'))['best']['typical_epsilon'])")
    timed $PY eval/run.py "${TEST[@]}" method=typical method.epsilon=$EPS method.bonus=nu \
        "out_dir='$T/typical(eps=$EPS,nu)'"
    $PY eval/pool.py $T --ref "typical(eps=$EPS,nu)" --partial ;;
  val200_a|val200_b)
    if [[ $STEP == val200_a ]]; then
      timed $PY eval/run.py "${V200[@]}" method=sd out_dir=$R/val200/sd; EPSS=(0.03)
    else EPSS=(0.1 0.01); fi
    for EPS in "${EPSS[@]}"; do
      timed $PY eval/run.py "${V200[@]}" method=typical method.epsilon=$EPS method.bonus=nu \
          "out_dir='$R/val200/typical(eps=$EPS,nu)'"
    done ;;
  choose_val200) $PY eval/choose_start.py $R/val200 --lambda 0.1 --keep-score-of sd --margin 0.02 \
                     --out $R/choice_val200.json ;;
  test_eps_a|test_eps_b)
    EPS=$([[ $STEP == test_eps_a ]] && echo 0.03 || echo 0.01)
    timed $PY eval/run.py "${TEST[@]}" method=typical method.epsilon=$EPS method.bonus=nu \
        "out_dir='$T/typical(eps=$EPS,nu)'" ;;
  train)
    OVR=$($PY -c "import json; print(json.load(open('$CHOICE'))['overrides'])")
    [ -f $RUN/head/config.json ] || timed $PY train/run.py "${MODEL[@]}" \
        "data.holdout=$HOLD" lambda=0.1 $OVR head.init_mode=flip head.use_hidden=false \
        algo.lr=0.03 \
        rollout.prompts_per_step=8 rollout.samples_per_prompt=1 rollout.max_new_tokens=$TOK train.steps=200 \
        train.max_minutes=45 checkpoint.every=$EVERY checkpoint.keep=10 logger=disabled progress=false resume=true \
        hydra.run.dir=$RUN ;;
  select_a|select_b)  # the candidates split over the two cores (every other one), then `choose`s them
    ALL=$(flock $RUN/.export.lock $PY eval/choose_head.py export $RUN | tr , '\n')  # rule, start, checkpoints
    if [[ $VARIANT == val200 ]]; then  # the rule on one core, the last checkpoint on the other, on the 200
      HEADS=$(if [[ $STEP == select_a ]]; then head -n 1 <<< "$ALL"; else tail -n 1 <<< "$ALL"; fi); GATE=("${V200[@]}")
    else
      HALF=$([[ $STEP == select_a ]] && echo 1 || echo 0)
      HEADS=$(awk -v k=$HALF 'NR % 2 == k' <<< "$ALL" | paste -sd, -); GATE=("${VAL[@]}")
    fi
    timed $PY eval/frontier.py "${GATE[@]}" 'frontier.baselines=[]' 'frontier.grid=[]' "heads=[$HEADS]" \
        out_dir=${VH}_${STEP#select_} ;;
  select) $PY eval/choose_head.py choose ${VH}_a ${VH}_b --lambda 0.1 --out $RUN/selected.json
    # the choice is a record too: GSM8K keeps it beside its other records (MBPP's R already is the run's folder)
    [[ $R == "$HEADS_DIR" ]] || cp $RUN/selected.json $R/$(basename $RUN)_selected.json ;;
  test)
    HEAD=$($PY -c "import json; print(json.load(open('$RUN/selected.json'))['best']['head'])")
    timed $PY eval/run.py "${TEST[@]}" method=diversed head=$HEAD "out_dir='$T/selected($(basename $RUN))'"
    if [[ $VARIANT != flip ]]; then  # the start's own rule (typical's ν-form, bonus from ν) joins the envelope
      EPS=$($PY -c "import json; print(json.load(open('$CHOICE'))['best']['typical_epsilon'])")
      timed $PY eval/run.py "${TEST[@]}" method=typical method.epsilon=$EPS method.bonus=nu \
          "out_dir='$T/typical(eps=$EPS,nu)'"
    fi
    $PY eval/pool.py $T --ref "selected($(basename $RUN))" ;;
  *) echo "real_head.sh: STEP is val_a, val_b, val_c, wide, choose, loose_a, loose_b, choose_loose, test_loose, test_eps_a," \
          "test_eps_b, val200_a, val200_b, choose_val200, train, select_a, select_b, select or test" >&2
     exit 2 ;;
esac

#!/bin/bash
# issue 29's next lever on precise-arguments: the SFT fit spread over the four start depths (6 oracle episodes at
# each of levels 1-4) instead of all 24 at the decision (level 1), then GRPO on top: the all-together arm
# (adaptive start depth, shaped reward, rescue hints) first, the fixed arm after it (ARMS=all to stop there).
# The policy is the demo's warm start, made first when missing (`trace run ... --until base`).
# Wall time, 2 cores: warm start ~40 min on Sapphire Rapids (AMX, bf16), ~2-3 h on an AVX2-only CPU (float32, 4-7 min
# per SFT step); then base evaluation ~19 min, the fit ~17 min, each arm ~30 min and its evaluation ~19 min, the
# fit's evaluation last (~19 min) (Sapphire Rapids figures; about 1.6x that on the AVX2-only CPU).
# A rerun continues where an interrupted one stopped: the warm start and the fit from their last SFT step, an arm
# from its last GRPO step (checkpoints); finished arms and every evaluation whose inputs are unchanged are reused.
# VARIANT=decision runs the level-1 fit alone (--arms none), for the same-session comparison; VARIANT=g8 the
# all-together arm with groups of 8.
set -e
source /work/venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRACE_CACHE=/tmp/trace-cache
cd "$(dirname "$0")/../../.."
RUNS=${RUNS:-/work/runs}
POLICY=$RUNS/demo/01-base/sft-0/merged
[ -d "$POLICY" ] || trace run trace_train/pipeline/configs/demo.toml --until base --out "$RUNS/demo"
if [ "${VARIANT:-levels}" = g8 ]; then
  # session 61: the all-together arm with groups of 8 (2 per step, 56 rollouts), where signal_probe.py measured
  # 0.58 informative at level 1; the fit and the base evaluation are reused when copied from an earlier --out
  # (sft/, evals/base.json)
  python benchmarks/grpo_arms.py --policy "$POLICY" --capability precise-arguments \
    --arms all --sft-episodes 24 --sft-levels 1 2 3 4 --group-size 8 --groups-per-step 2 --budget 56 \
    --out "$RUNS/arms-g8"
elif [ "${VARIANT:-levels}" = decision ]; then
  python benchmarks/grpo_arms.py --policy "$POLICY" --capability precise-arguments \
    --arms none --sft-episodes 24 --out "$RUNS/arms-decision"
else
  python benchmarks/grpo_arms.py --policy "$POLICY" --capability precise-arguments \
    --arms "${ARMS:-all,fixed}" --sft-episodes 24 --sft-levels 1 2 3 4 --out "$RUNS/arms-levels"
fi
# Session 39 stopped the levels run after its fit (the base evaluation and the arm would not have finished in the
# session) and evaluated the fit with the script below (grpo_arms' own evaluation, kept in <out>/evals/sft.json,
# which a rerun of this command reuses):
#   python benchmarks/results/grpo_arms_sft_levels/evaluate_fit.py /work/runs/arms40-levels /work/runs/demo40/01-base/sft-0/merged
# Session 50 (an AVX2-only machine) began the warm start and stopped it after 3 of 32 steps: the measurement would
# not have finished in the session, and a machine's run folder does not outlive it.
# Session 60 (the AVX2-only EPYC) ran it with ARMS=all: base evaluation 796 s, fit 834 s, the all-together arm two
# steps with no informative group (avx2-session60/; docs/training.md). signal_probe.py measures the fit's per-task
# success per level.

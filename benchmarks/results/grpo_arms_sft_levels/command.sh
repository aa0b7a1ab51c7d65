#!/bin/bash
# issue 29's next lever on precise-arguments: the SFT fit spread over the four start depths (6 oracle episodes at
# each of levels 1-4) instead of all 24 at the decision (level 1), then the fixed arm's 24 GRPO rollouts on top.
# The policy is the demo's warm start (`trace run trace_train/pipeline/configs/demo.toml --until base`).
# VARIANT=decision runs the level-1 fit alone (--arms none), for the same-session comparison.
source /work/venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRACE_CACHE=/tmp/trace-cache
cd /work/main
if [ "${VARIANT:-levels}" = decision ]; then
  python benchmarks/grpo_arms.py --policy /work/runs/demo40/01-base/sft-0/merged --capability precise-arguments \
    --arms none --sft-episodes 24 --out /work/runs/arms40-decision
else
  python benchmarks/grpo_arms.py --policy /work/runs/demo40/01-base/sft-0/merged --capability precise-arguments \
    --arms fixed --sft-episodes 24 --sft-levels 1 2 3 4 --out /work/runs/arms40-levels
fi
# Session 39 stopped the levels run after its fit (the base evaluation and the arm would not have finished in the
# session) and evaluated the fit with the script below (grpo_arms' own evaluation, kept in <out>/evals/sft.json,
# which a rerun of this command reuses):
#   python benchmarks/results/grpo_arms_sft_levels/evaluate_fit.py /work/runs/arms40-levels /work/runs/demo40/01-base/sft-0/merged

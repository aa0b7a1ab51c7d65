#!/bin/bash
# issue 29's arms on precise-arguments: the derived env where the demo's SFT-fitted adapter already solves some
# level-1 episodes (transfer37's fit: 0.50/0.75 success per GRPO step); fixed vs all, 24 rollouts each
source /work/venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRACE_CACHE=/tmp/trace-cache PYTHONPATH=/work/frozen38b OMP_NUM_THREADS=1
cd /work/frozen38b
python benchmarks/grpo_arms.py --policy /work/runs/demo37/01-base/sft-0/merged --capability precise-arguments \
  --arms fixed,all --sft-episodes 24 --out /work/runs/arms38

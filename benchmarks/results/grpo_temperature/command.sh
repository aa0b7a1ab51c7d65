# The shipped base's success and informative groups at GRPO's sampling temperature (docs/training.md).
M=runs/demo/01-base/sft-0/merged   # the demo's base stage materialises the shipped base here
for T in 1.0 0.6; do
  trace rollout trace/retail-v2 --model $M --episodes 32 --seed-offset 0 --difficulty 1 --max-turns 12 \
      --max-new-tokens 192 --batch-size 32 --temperature $T --sampling-seed 0 --dtype auto --out /tmp/temp-$T
  trace calibrate trace/retail-v2 --model $M --levels 1 --seeds 6 --group-size 8 --batch-size 48 --temperature $T \
      --max-turns 12 --max-new-tokens 192 --dtype auto --json /tmp/cal-target-$T.json --no-write
done
for E in precondition-checking structured-reasoning; do
  trace calibrate trace/retail-$E-v0 --model $M --levels 1 --seeds 4 --group-size 8 --batch-size 32 --temperature 0.6 \
      --max-turns 12 --max-new-tokens 192 --dtype auto --json /tmp/cal-$E-0.6.json --no-write
done

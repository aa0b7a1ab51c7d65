"""GRPO's train phase with and without the rows of equal-reward groups, on one real step of the demo's direct GRPO.

A group whose rollouts all score alike has advantage 0 on every row; without a KL term those rows' gradient is
exactly 0, so the trainer counts them in the normaliser and skips their forward/backward passes
(``GRPOTrainer._zero_gradient_rows``). In the demo about half of the groups were like that (informative share
0.50). This benchmark collects one step's groups from the shipped base on retail-v2's train tasks (the demo's
settings: difficulty 1, T 0.6, rescue hints), then runs the same update twice from the same weights: with the
skip and with every row passed (the old behaviour), and prints both train phases, their ratio, the largest
difference between the two updates' gradients and the process's peak memory.

    python benchmarks/bench_grpo_idle_rows.py                    # 2 groups x 4, shipped base, --dtype auto
    python benchmarks/bench_grpo_idle_rows.py --groups 2 --group-size 8 --json-out results.json

When every collected group is informative (or none is) there is nothing to compare: the script says so and
exits 0 after printing the figures; ``--flatten-last`` makes the last group's rewards equal so that the
comparison always has idle rows (its gradient check is then on rewards that were not sampled).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from trace_train.bases import by_name, materialise
from trace_train.config import GRPOArgs
from trace_train.grpo.trainer import GRPOTrainer
from trace_train.metrics import cpu_name, peak_rss_mb
from trace_train.rollout import RolloutStats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default="retail-v2-smollm2-135m", help="shipped base (trace base list)")
    p.add_argument("--work", default="runs/bench-grpo-idle", help="folder for the merged base and the run")
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--micro-batch-tokens", type=int, default=2048, help="the demo's base fit used 2048")
    p.add_argument("--flatten-last", action="store_true", help="make the last group's rewards equal")
    p.add_argument("--json-out", default=None)
    ns = p.parse_args()

    work = Path(ns.work)
    model = materialise(by_name(ns.base), work / "base", dtype=ns.dtype)
    args = GRPOArgs(
        env_id="trace/retail-v2",
        model=str(model),
        out=str(work / "grpo"),
        difficulty=1,
        steps=1,
        groups_per_step=ns.groups,
        group_size=ns.group_size,
        temperature=0.6,
        max_new_tokens=192,
        max_turns=12,
        rescue_fraction=0.5,
        micro_batch_size=4,
        micro_batch_tokens=ns.micro_batch_tokens,
        dtype=ns.dtype,
        num_threads=ns.threads,
        tensorboard=False,
        progress=False,
        save_every=1000,
    )
    trainer = GRPOTrainer(args)
    t0 = time.perf_counter()
    trajs, step = trainer.collect_groups(RolloutStats())
    generation_s = time.perf_counter() - t0
    print(f"collected {len(trajs)} rollouts in {generation_s:.0f} s", flush=True)
    if ns.flatten_last:
        last = max(t.spec.group for t in trajs)
        for t in trajs:
            if t.spec.group == last:
                t.reward = 0.0
    start = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}

    def update(skip: bool) -> tuple[float, dict, dict[str, torch.Tensor]]:
        trainer.policy.model.load_state_dict(start)
        trainer.optimizer.state.clear()
        if not skip:  # the old behaviour: every row forward and backward
            trainer._zero_gradient_rows = lambda adv: torch.zeros_like(adv, dtype=torch.bool)
        grads: dict[str, torch.Tensor] = {}
        real_clip = trainer._clip_and_check

        def spy():
            grads.update(
                {n: q.grad.clone() for n, q in trainer.model.named_parameters() if q.grad is not None}
            )
            return real_clip()

        trainer._clip_and_check = spy
        t = time.perf_counter()
        metrics = trainer.optimise(trajs)
        seconds = time.perf_counter() - t
        trainer._clip_and_check = real_clip
        trainer.__dict__.pop("_zero_gradient_rows", None)
        return seconds, metrics, grads

    # skip, all rows, skip again: the first pass also warms caches and allocators, so each path's time is the
    # faster of its passes only where it ran twice; the gradients compared are the first of each
    skip_s, skip_m, skip_g = update(True)
    full_s, full_m, full_g = update(False)
    again_s, _, _ = update(True)
    diff = max((float((skip_g[k] - full_g[k]).abs().max()) for k in full_g), default=0.0)
    scale = max((float(g.abs().max()) for g in full_g.values()), default=0.0)
    tokens = [len(t.training_ids()[0]) for t in trajs]
    out = {
        "cpu": cpu_name(),
        "dtype": str(trainer.policy.model.dtype),
        "rollouts": len(trajs),
        "tokens_per_rollout_mean": sum(tokens) / len(tokens),
        "informative_group_share": step["informative_group_share"],
        "success_rate": step["success_rate"],
        "generation_s": generation_s,
        "idle_rows": skip_m["zero_advantage_rows"],
        "train_s_skip": [skip_s, again_s],
        "train_s_all_rows": full_s,
        "speedup": full_s / max(min(skip_s, again_s), 1e-9),
        "peak_rss_mb": peak_rss_mb(),
        "grad_max_abs_diff": diff,
        "grad_max_abs": scale,
        "flattened_last_group": ns.flatten_last,
    }
    print(json.dumps(out, indent=2))
    if not skip_m["zero_advantage_rows"] or skip_m.get("zero_advantage_batch"):
        print("every group informative or none: nothing was skipped here (rerun, or --flatten-last)")
    if ns.json_out:
        Path(ns.json_out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

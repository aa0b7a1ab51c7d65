"""Learning demo: SFT warm start on train-split oracle trajectories, then seed-grouped GRPO on the train split;
test-split success before/after with 95% CIs, and the curve in between. Meant to fit ~30 min on 2 CPU cores.

    python benchmarks/learning_demo.py --out runs/demo            # embedded SmolLM2-135M
    python benchmarks/learning_demo.py --env trace/retail-v0 ...  # any env with oracle_actions()

Without --env it uses a reasoning-gym task: trace_gym's adapter (``trace/rg-<dataset>-v0``) when installed,
otherwise a minimal built-in wrapper (same shape: single turn, plain chat messages, oracle = the answer).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from trace_train.evaluate import evaluate
from trace_train.grpo.trainer import GRPOArgs, GRPOTrainer
from trace_train.policies.base import SamplingConfig
from trace_train.policies.hf import HFPolicy
from trace_train.sft import SFTArgs, run_sft

SYSTEM = "Solve the arithmetic problem. Reply with only the final answer, a single integer."


class ArithmeticEnv(gym.Env):
    """Fallback reasoning-gym wrapper: one item per seed (train/test from disjoint dataset seeds)."""

    def __init__(self, dataset: str = "basic_arithmetic", **config: Any):
        import reasoning_gym

        self.rg, self.dataset, self.config = reasoning_gym, dataset, config
        self.observation_space = gym.spaces.Text(4096)
        self.action_space = gym.spaces.Text(4096)
        self.tools: list[dict[str, Any]] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        ds_seed = int(self.np_random.integers(2**31))  # test seeds come from a disjoint seed range
        ds = self.rg.create_dataset(self.dataset, size=1, seed=ds_seed, **self.config)
        self.ds, self.entry = ds, ds[0]
        self.messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": self.entry["question"]},
        ]
        return list(self.messages), {"tools": [], "base_system_prompt": SYSTEM}

    def oracle_actions(self):
        return [{"content": str(self.entry["answer"])}]

    def step(self, action):
        text = action if isinstance(action, str) else action.get("content") or ""
        reward = float(self.ds.score_answer(text.strip(), self.entry) or 0.0)
        self.messages = [*self.messages, {"role": "assistant", "content": text}]
        return list(self.messages), reward, True, False, {}


def pick_env(env_id: str | None, digits: int = 1) -> str:
    import contextlib

    with contextlib.suppress(ImportError):
        import trace_gym  # noqa: F401
    if env_id:
        return env_id
    fallback = "demo/arith-v0"
    if fallback not in gym.registry:
        gym.register(
            fallback,
            entry_point=ArithmeticEnv,
            kwargs=dict(
                min_terms=2,
                max_terms=2,
                min_digits=1,
                max_digits=digits,
                operators=("+", "-"),
                allow_negation=False,
            ),
        )
    return fallback


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env", default=None)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--digits", type=int, default=1, help="operand digits of the fallback arithmetic task")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--sft-episodes", type=int, default=256)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--eval-episodes", type=int, default=200)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--max-turns", type=int, default=1)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--time-budget-min", type=float, default=30.0)
    p.add_argument("--sft-dir", default=None, help="reuse the output of an earlier SFT phase (its merged/)")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env_id = pick_env(a.env, a.digits)
    t_start = time.time()
    log = open(out / "demo_log.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def record(**kw):
        kw["elapsed_s"] = round(time.time() - t_start, 1)
        print(json.dumps(kw), flush=True)
        log.write(json.dumps(kw) + "\n")
        log.flush()

    # 1. SFT warm start on train-split oracle trajectories -> merged model = the base agent.
    if a.sft_dir:
        sft = json.loads((Path(a.sft_dir) / "sft_summary.json").read_text())
        record(phase="sft", reused=a.sft_dir, **{k: v for k, v in sft.items() if k != "adapter"})
    else:
        sft = run_sft(
            SFTArgs(
                env_id=env_id,
                model=a.model,
                out=str(out / "sft"),
                episodes=a.sft_episodes,
                epochs=1,
                lr=2e-4,
                batch_size=16,
                merge=True,
                dtype=a.dtype,
                max_turns=max(a.max_turns, 8),
                seed_offset=500_000,  # SFT tasks disjoint from the GRPO ones (GRPO counts up from 0), both train split
            )
        )
        record(phase="sft", **{k: v for k, v in sft.items() if k != "adapter"})
    base = sft["merged"]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=a.max_new_tokens)

    def test_eval(policy: HFPolicy, tag: str):
        r = evaluate(
            policy,
            env_id,
            episodes=a.eval_episodes,
            split="test",
            sampling=greedy,
            max_turns=a.max_turns,
            batch_size=50,
            out_jsonl=out / f"eval-{tag}.jsonl",
        )
        return r

    # 2. GRPO on the train split with test-split evaluations along the way.
    args = GRPOArgs(
        env_id=env_id,
        model=base,
        out=str(out / "grpo"),
        steps=a.steps,
        groups_per_step=a.groups,
        group_size=a.group_size,
        max_new_tokens=a.max_new_tokens,
        max_turns=a.max_turns,
        loss_type="dapo",
        lr=a.lr,
        dynamic_sampling=True,
        max_refill_rounds=1,
        micro_batch_size=32,
        lora_rank=16,
        lora_alpha=32,
        dtype=a.dtype,
        save_every=20,
        progress=False,
    )
    trainer = GRPOTrainer(args)
    before = test_eval(trainer.policy, "before")
    record(
        phase="eval",
        step=0,
        line=before.line(),
        success=before.success_rate,
        ci=before.success_ci,
        reward=before.reward_mean,
        reward_ci=before.reward_ci,
    )
    budget = a.time_budget_min * 60
    while trainer.state["step"] < a.steps and time.time() - t_start < budget:
        args.steps = trainer.state["step"] + a.eval_every  # train in chunks, evaluating in between
        args.steps = min(args.steps, a.steps)
        result = trainer.train()
        ev = test_eval(trainer.policy, f"step{trainer.state['step']}")
        record(
            phase="eval",
            step=trainer.state["step"],
            train_reward=result.get("reward_mean"),
            line=ev.line(),
            success=ev.success_rate,
            ci=ev.success_ci,
            reward=ev.reward_mean,
            reward_ci=ev.reward_ci,
        )
    curve = [json.loads(x) for x in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    for m in curve:
        record(
            phase="train_curve",
            step=m["step"],
            reward_mean=round(m["reward_mean"], 3),
            success_rate=round(m["success_rate"], 3),
            informative=m["informative_group_share"],
        )
    record(phase="summary", before=before.line(), after=ev.line())


if __name__ == "__main__":
    main()

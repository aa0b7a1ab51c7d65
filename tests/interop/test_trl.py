"""trace envs in TRL's GRPOTrainer through rollout_func (runs when the `bench` extra, with trl, is installed)."""

import math

import pytest

trl = pytest.importorskip("trl", reason="TRL is in the `bench` extra: pip install 'trace-agentic[bench]'")
pytest.importorskip("datasets", reason="TRL's trainer needs the datasets package")

from trace_train.trl_env import TraceRollout  # noqa: E402

ENV_ID = "trace/test-library-v0"


def test_rollout_dataset_holds_opening_conversations():
    rollout = TraceRollout(ENV_ID)
    data = rollout.dataset(range(3))
    assert data.num_rows == 3 and data[1]["seed"] == 1
    assert [m["role"] for m in data[0]["prompt"]] == ["system", "user"]
    with pytest.raises(ValueError, match="test seeds"):
        TraceRollout(ENV_ID, split="test")


def _parity_reward(completions, **kwargs):
    """1 when the completion's bytes sum to an even number: a tiny random model earns it about half the time, so
    a group's rewards differ and its advantages (and gradient) are not zero (the library env alone scores 0)."""
    texts = [
        c if isinstance(c, str) else " ".join(str(m.get("content") or "") for m in c) for c in completions
    ]
    return [float(sum(t.encode("utf-8", "replace")) % 2 == 0) for t in texts]


def test_grpo_trainer_trains_on_trace_episodes(tmp_path, monkeypatch):
    import torch

    from trace_train.models import build_tiny_model

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    model, tokenizer = build_tiny_model()
    rollout = TraceRollout(ENV_ID, max_turns=2, max_total_tokens=1024)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=8,
        num_generations=8,  # all 8 parity rewards equal: 1 in 128, whatever the CPU samples
        max_completion_length=8,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
    )
    trainer = trl.GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[rollout.reward, _parity_reward],
        train_dataset=rollout.dataset(range(4)),
        rollout_func=rollout,
        args=args,
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    # Each group shares its seed; env tokens are masked out; the policy's tokens were trained on.
    seeds = [t.spec.seed for t in rollout.last]
    assert len(seeds) == 8 and len(set(seeds)) == 1
    assert all(0 in t.policy_mask and 1 in t.policy_mask for t in rollout.last)
    assert all(not math.isnan(lp) for t in rollout.last for lp in t.sampler_logprobs if lp != 0.0)
    history = trainer.state.log_history
    assert any("loss" in h for h in history)
    # the group's rewards differed, so the step had a gradient, and the weights moved
    logged = next(h for h in history if "reward_std" in h or "rewards/_parity_reward/std" in h)
    assert logged.get("reward_std", logged.get("rewards/_parity_reward/std", 0.0)) > 0, logged
    assert next(h["grad_norm"] for h in history if "grad_norm" in h) > 0
    moved = [n for n, p in model.named_parameters() if not torch.equal(before[n], p)]
    assert moved, "nothing trained"

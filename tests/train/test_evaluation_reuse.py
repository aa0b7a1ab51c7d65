"""The evaluation stage's ``reuse``: episodes another row played with the same policy on the same tasks are kept
as they are and only the other tasks are played (the router's tasks given to the base slot are the base's)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from trace_train.config import EvalSettings
from trace_train.pipeline.stages.evaluation import _evaluate
from trace_train.policies.hf import HFPolicy


def _ctx(tmp_path, resume=False):
    settings = EvalSettings(episodes=4, max_new_tokens=6, max_turns=2, batch_size=2, min_oracle_ceiling=0)
    config = SimpleNamespace(
        target=SimpleNamespace(env_id="traintest/lookup-v0", difficulty=None), evaluation=settings
    )
    return SimpleNamespace(config=config, dir=tmp_path, resume=resume, log=lambda text: None)


def _policy(model_dir, name: str) -> HFPolicy:
    policy = HFPolicy.from_pretrained(str(model_dir))
    policy.name = name  # the records name the model that played them
    return policy


def _spy_on_played(monkeypatch) -> list:
    import trace_train.episodes as ev

    played, real = [], ev.stream_collect
    monkeypatch.setattr(
        ev, "stream_collect", lambda p, e, specs, *a, **k: played.extend(specs) or real(p, e, specs, *a, **k)
    )
    return played


def test_reused_episodes_are_kept_verbatim_and_only_the_other_tasks_are_played(
    tiny_model_dir, tmp_path, monkeypatch
):
    base, other = _policy(tiny_model_dir, "base-model"), _policy(tiny_model_dir, "router-model")
    _, base_trajs = _evaluate(_ctx(tmp_path), "base", base, "base")
    _, alone = _evaluate(_ctx(tmp_path), "alone", other, "alone")  # the other policy on every task
    reused = [base_trajs[0], base_trajs[2]]

    played = _spy_on_played(monkeypatch)
    row, trajs = _evaluate(_ctx(tmp_path), "router", other, "router", reuse=reused)
    assert sorted(spec.seed for spec in played) == [base_trajs[1]["seed"], base_trajs[3]["seed"]]
    by_seed = {t["seed"]: t for t in trajs}
    for i, t in enumerate(base_trajs):
        expected = t if i in (0, 2) else alone[i]
        assert by_seed[t["seed"]] == expected
    assert [r["model"] for r in map(json.loads, (tmp_path / "router.jsonl").open())] == [
        "base-model",
        "router-model",
        "base-model",
        "router-model",
    ]
    assert row["episodes"] == 4


def test_a_resumed_row_keeps_its_finished_episodes_and_the_reused_ones(tiny_model_dir, tmp_path, monkeypatch):
    base, other = _policy(tiny_model_dir, "base-model"), _policy(tiny_model_dir, "router-model")
    _, base_trajs = _evaluate(_ctx(tmp_path), "base", base, "base")
    _, alone = _evaluate(_ctx(tmp_path), "alone", other, "alone")
    # an interrupted router row: one of its own episodes written (task 1), then the run stopped
    (tmp_path / "router.jsonl").write_text(json.dumps(alone[1]) + "\n")
    played = _spy_on_played(monkeypatch)
    _, trajs = _evaluate(_ctx(tmp_path, resume=True), "router", other, "router", reuse=[base_trajs[0]])
    assert [spec.seed for spec in played] == [base_trajs[2]["seed"], base_trajs[3]["seed"]]
    assert trajs == [base_trajs[0], alone[1], alone[2], alone[3]]

    # without resume an old file is not trusted: only the reused episodes are kept
    played.clear()
    _evaluate(_ctx(tmp_path), "router", other, "router", reuse=[base_trajs[0]])
    assert len(played) == 3

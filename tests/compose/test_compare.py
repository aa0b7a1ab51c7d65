"""``trace compare`` end to end on a toy target, and the task-level router's per-episode choice."""

from __future__ import annotations

import json

import torch

from tests.compose.helpers import randomise_gates
from trace_train.cli import main
from trace_train.compose.artefact import save_composition
from trace_train.compose.baselines import TaskRouterPolicy
from trace_train.policies.base import SamplingConfig


def test_compare_cli_pairs_every_method_with_the_base(composition, compose_base, tmp_path, capsys):
    randomise_gates(composition, seed=2)
    for spec, env in zip(
        composition.adapters, ["traintest/lookup-v0", "traintest/chat3-v0", "traintest/echo-v0"], strict=True
    ):
        spec.env_id = env
    art = save_composition(composition, tmp_path / "art", base_model=str(compose_base)).parent
    out = tmp_path / "cmp"
    code = main(
        [
            "compare", "traintest/lookup-v0", "--composition", str(art), "--models", "base,adapters,router,moe,uniform,arrow,xlora",
            "--episodes", "3", "--max-turns", "2", "--max-new-tokens", "5", "--batch-size", "3",
            "--min-oracle-ceiling", "0",  # 5 tokens cut the lookup oracle's call: the comparison is under test
            "--capability-episodes", "1", "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    report = json.loads((out / "compare.json").read_text())
    names = [r["model"] for r in report["rows"]]
    assert names[:4] == ["base", "cap0", "cap1", "cap2"] and {"router", "moe", "uniform", "arrow"} <= set(
        names
    )
    assert "xlora" in names or "xlora" in report["notes"]
    seeds = {
        n: sorted(json.loads(line)["seed"] for line in (out / f"{n}.jsonl").read_text().splitlines())
        for n in names
    }
    assert len({tuple(s) for s in seeds.values()}) == 1, "every method must run on the same seeds"
    # the router's episode on each task is the one of the slot it chose (every slot's row was played first)
    records = {n: {r["seed"]: r for r in map(json.loads, (out / f"{n}.jsonl").open())} for n in names}
    assert report["router_reused_episodes"] == 3 and len(report["router_routes"]) == 3
    for seed, slot in report["router_routes"].items():
        assert records["router"][int(seed)] == records[slot][int(seed)]
    for row in report["rows"][1:]:
        v = row["vs_base"]
        assert v["n"] == 3 and 0.0 <= v["mcnemar_p"] <= 1.0
    # gate choices: the target plus every capability env, split by turn type; a chart is drawn
    envs = {c["env"] for c in report["gate_choices"]}
    assert envs == {"target", "cap0", "cap1", "cap2"}
    assert (out / "gate_choices.png").stat().st_size > 1000
    md = (out / "compare.md").read_text()
    assert "exact McNemar p" in md and "| moe |" in md
    assert "<table" in (out / "compare.html").read_text()
    assert "moe" in capsys.readouterr().out


def test_compare_rejects_unknown_models(composition, compose_base, tmp_path, capsys):
    art = save_composition(composition, tmp_path / "art", base_model=str(compose_base)).parent
    code = main(["compare", "traintest/lookup-v0", "--composition", str(art), "--models", "base,nonsense"])
    assert code == 2
    assert "unknown model(s) ['nonsense']" in capsys.readouterr().err


def test_compose_cli_names_a_bad_adapter_dir(tmp_path, capsys):
    code = main(
        [
            "compose",
            "--adapters",
            str(tmp_path / "missing"),
            "--envs",
            "traintest/echo-v0",
            "--model",
            str(tmp_path),
        ]
    )
    assert code == 2
    assert "missing" in capsys.readouterr().err


def test_task_router_classifies_once_per_episode(composition, monkeypatch):
    router = TaskRouterPolicy(composition, composition.tokenizer, composition.adapters)
    calls = []
    monkeypatch.setattr(router, "classify", lambda prompt: calls.append(prompt) or 2)
    first = [5, 6, 7, 8]
    assert router.slot_for(first) == 2
    assert router.slot_for(first + [9, 10, 11]) == 2  # a later turn of the same conversation
    assert len(calls) == 1
    router.slot_for([5, 6, 99])  # another conversation
    assert len(calls) == 2


@torch.no_grad()
def test_task_router_serves_each_episode_with_its_adapter(composition, monkeypatch):
    router = TaskRouterPolicy(composition, composition.tokenizer, composition.adapters)
    slots = {5: 1, 6: 0, 7: 3}
    monkeypatch.setattr(router, "classify", lambda prompt: slots[prompt[0]])
    prompts = [[5, 9, 9], [6, 9, 9], [7, 9, 9]]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=4)
    outs = router.generate_ids(prompts, sampling)
    from trace_train.compose.baselines import SlotPolicy

    for prompt, out in zip(prompts, outs, strict=True):
        alone = SlotPolicy(composition, composition.tokenizer, slots[prompt[0]]).generate_ids(
            [prompt], sampling
        )[0]
        assert out == alone


def _episodes(policy, env_id="traintest/lookup-v0", n=2, engine=None):
    from trace_gym.registration import make_env
    from trace_train.rollout import ResetSpec, collect

    envs = [make_env(env_id) for _ in range(n)]
    specs = [ResetSpec(seed=i, group=i) for i in range(n)]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=6)
    trajs = collect(policy, envs, specs, sampling, max_turns=2, engine=engine)
    return [t.token_ids for t in trajs]


def test_slot_policy_is_the_adapter_on_the_cached_engine(composition, adapters, compose_base):
    from peft import PeftModel

    from trace_train.compose.baselines import SlotPolicy
    from trace_train.models import load_model
    from trace_train.policies.hf import HFPolicy

    randomise_gates(composition, seed=4)  # forcing must win over the gates
    base, tok = load_model(compose_base)
    peft = HFPolicy(PeftModel.from_pretrained(base, str(adapters[1])), tok, merge_for_generation=False)
    assert SlotPolicy(composition, composition.tokenizer, 2).engine == "cached"
    assert _episodes(SlotPolicy(composition, composition.tokenizer, 2)) == _episodes(peft)


def test_moe_policy_same_on_cached_and_simple_engines(composition):
    """The MoE runs on the cached engine (recording or not) with the simple engine's tokens, and the gate
    choices it records as it decodes are the ones a teacher-forced replay reads."""
    from trace_train.compose.baselines import MoEPolicy

    randomise_gates(composition, seed=6)
    plain = MoEPolicy(composition, composition.tokenizer)
    cached = MoEPolicy(composition, composition.tokenizer, record_choices=True)
    simple = MoEPolicy(composition, composition.tokenizer, record_choices=True)
    assert plain.engine == cached.engine == "cached"
    reference = _episodes(simple, n=3, engine="simple")
    assert _episodes(plain, n=3) == reference
    assert _episodes(cached, n=3) == reference
    assert len({slot for (_, _, slot) in cached.choices}) > 1
    assert sum(cached.choices.values()) == sum(simple.choices.values()) > 0
    differ = sum((cached.choices - simple.choices).values())
    assert differ <= 0.01 * sum(simple.choices.values())  # float noise may flip a near-tied gate


def test_task_router_on_the_cached_engine_equals_the_simple_engine(composition, monkeypatch):
    """The router's cached-engine rollouts (one engine per slot) give the simple engine's tokens."""
    policies = []
    for _ in range(2):
        router = TaskRouterPolicy(composition, composition.tokenizer, composition.adapters)
        order = iter([1, 3, 0])  # episodes 0, 1, 2 (classified in that order) get adapter 1, adapter 3, base
        monkeypatch.setattr(router, "classify", lambda prompt, order=order: next(order))
        policies.append(router)
    cached = _episodes(policies[0], n=3)
    assert cached == _episodes(policies[1], n=3, engine="simple")
    assert sorted(policies[0].__dict__["_slot_engines"]) == [0, 1, 3]  # one cached engine per slot used


def test_pipeline_entry_points(composition, compose_base, adapters, tmp_path):
    """``moe_policy(artefact)`` and ``router_policy(model, {capability: adapter})`` as the pipeline calls them."""
    from trace_train.compose.baselines import MoEPolicy
    from trace_train.compose.compare import moe_policy, router_policy

    art = save_composition(composition, tmp_path / "art", base_model=str(compose_base)).parent
    moe = moe_policy(str(art), dtype="float32")
    assert isinstance(moe, MoEPolicy) and moe.composition.names == ["cap0", "cap1", "cap2"]
    router = router_policy(str(compose_base), {"x": str(adapters[0]), "y": str(adapters[1])}, dtype="float32")
    assert isinstance(router, TaskRouterPolicy) and router.composition.slot_names == ["base", "x", "y"]
    assert router.slot_for([5, 6, 7]) in (0, 1, 2)


def test_compose_cli_trains_and_writes_the_artefact(compose_base, adapters, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["compose", "--model", str(compose_base), "--adapters", str(adapters[0]), str(adapters[1])]
    argv += [
        "--envs",
        "traintest/chat3-v0",
        "traintest/lookup-v0",
        "--names",
        "chat",
        "look",
        "--out",
        str(out),
    ]
    argv += [
        "--episodes-per-env",
        "2",
        "--base-episodes-per-env",
        "1",
        "--min-reward",
        "0",
        "--max-new-tokens",
        "4",
    ]
    argv += ["--max-turns", "2", "--steps", "2", "--batch-size", "2", "--save-every", "1", "--no-tensorboard"]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["slots"] == ["base", "chat", "look"]
    assert manifest["training"]["args"]["steps"] == 2 and (out / "checkpoints" / "latest").is_file()
    assert "composition written to" in capsys.readouterr().out


def test_router_and_moe_stream_with_continuous_batching(composition, monkeypatch):
    """stream_collect (what trace evaluate runs) with the router and the recording MoE: the same episodes as
    one batch, with episodes joining the running sessions."""
    from trace_gym.registration import make_env
    from trace_train.compose.baselines import MoEPolicy
    from trace_train.rollout import ResetSpec, collect, stream_collect

    randomise_gates(composition, seed=6)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=6)
    specs = [ResetSpec(seed=i, group=i) for i in range(5)]

    def router():
        policy = TaskRouterPolicy(composition, composition.tokenizer, composition.adapters)
        monkeypatch.setattr(policy, "classify", lambda prompt: len(prompt) % 2)
        return policy

    for make in (router, lambda: MoEPolicy(composition, composition.tokenizer, record_choices=True)):
        envs = [make_env("traintest/lookup-v0") for _ in specs]
        whole = collect(make(), envs, specs, sampling, max_turns=2, engine="simple")
        streamed = stream_collect(make(), envs[:2], specs, sampling, max_turns=2)
        assert [t.token_ids for t in streamed] == [t.token_ids for t in whole]


def test_compare_evaluates_the_target_at_the_asked_difficulty(
    composition, compose_base, tmp_path, monkeypatch
):
    """`--difficulty` reaches every target evaluation (the demo's table is at level 1, retail's default is 2)."""
    from trace_train.compose import compare as compare_module

    seen: list[tuple[str, int | None]] = []
    real_evaluate = compare_module.evaluate

    def spy(policy, env_id, settings=None, **kwargs):
        seen.append((env_id, kwargs.get("difficulty")))
        return real_evaluate(policy, env_id, settings, **kwargs)

    monkeypatch.setattr(compare_module, "evaluate", spy)
    art = save_composition(composition, tmp_path / "art", base_model=str(compose_base)).parent
    code = main(
        [
            "compare", "traintest/lookup-v0", "--composition", str(art), "--models", "base,cap0",
            "--episodes", "1", "--max-turns", "1", "--max-new-tokens", "3", "--difficulty", "2", "--min-oracle-ceiling", "0",
            "--no-gate-chart", "--out", str(tmp_path / "cmp"),
        ]
    )  # fmt: skip
    assert code == 0
    assert seen == [("traintest/lookup-v0", 2), ("traintest/lookup-v0", 2)]

"""The task-level router end to end on the tiny composition with its real zero-shot classifier (issue 31: every
other composition test replaces ``TaskRouterPolicy.classify``)."""

from __future__ import annotations

import torch

from tests.compose.helpers import randomise_gates
from trace_train.compose.baselines import SlotPolicy, TaskRouterPolicy
from trace_train.policies.base import SamplingConfig

SAMPLING = SamplingConfig(temperature=0.0, max_new_tokens=5)
EPISODES = [("traintest/lookup-v0", 0), ("traintest/echo-v0", 1), ("traintest/chat3-v0", 2)]


def _collect(policy, episodes):
    from trace_gym.registration import make_env
    from trace_train.rollout import ResetSpec, collect

    envs = [make_env(env_id) for env_id, _ in episodes]
    specs = [ResetSpec(seed=seed, group=i) for i, (_, seed) in enumerate(episodes)]
    return collect(policy, envs, specs, SAMPLING, max_turns=2, engine="simple")


def _router_ids(tokenizer, router: TaskRouterPolicy, prompt: list[int]) -> list[int]:
    """The paper's router prompt written out: the task, the menu of specialists, "Letter:"."""
    task = tokenizer.decode(prompt, skip_special_tokens=True)[-2000:]
    menu = "\n".join(f"{chr(ord('A') + i)}. {o}" for i, o in enumerate(router.options))
    messages = [
        {"role": "system", "content": router.INSTRUCTION},
        {"role": "user", "content": f"Task:\n{task}\n\nSpecialists:\n{menu}\n\nLetter:"},
    ]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return list(ids)


def _letters(tokenizer, n: int) -> list[int]:
    return [tokenizer.encode(chr(ord("A") + i), add_special_tokens=False)[0] for i in range(n)]


@torch.no_grad()
def _zero_shot_slot(base, tokenizer, router: TaskRouterPolicy, prompt: list[int]) -> int:
    """The plain base model (no adapter loaded at all) reads the router prompt; its likeliest letter is the slot."""
    logits = base(input_ids=torch.tensor([_router_ids(tokenizer, router, prompt)])).logits[0, -1]
    return int(logits[_letters(tokenizer, len(router.options))].argmax())


def _fit_base_to_route(base, tokenizer, router, prompts: list[list[int]], slots: list[int], steps: int = 80):
    """Teach the plain tiny base which letter each task's router prompt gets (a random base answers A to all)."""
    letters = _letters(tokenizer, len(router.options))
    batch = [(_router_ids(tokenizer, router, p), letters[s]) for p, s in zip(prompts, slots, strict=True)]
    opt = torch.optim.Adam(base.parameters(), lr=2e-2)
    for _ in range(steps):
        loss = sum(
            torch.nn.functional.cross_entropy(
                base(input_ids=torch.tensor([ids])).logits[0, -1:], torch.tensor([y])
            )
            for ids, y in batch
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    base.eval()


def _load_backbone(composition, base) -> None:
    """The fitted base weights into the composition's frozen backbone (LoRA-wrapped layers keep them under
    ``base_layer``)."""
    target = composition.model.state_dict()
    with torch.no_grad():
        for name, value in base.state_dict().items():
            key = name if name in target else name.replace(".weight", ".base_layer.weight")
            target[key].copy_(value)


def test_router_classifies_with_the_base_and_serves_each_episode_with_that_slot(composition, compose_base):
    from trace_train.models import load_model

    randomise_gates(composition, seed=3)  # the router must ignore the token gates
    for spec, description in zip(
        composition.adapters, ["look values up with tools", "chat briefly", "echo letters"], strict=True
    ):
        spec.description = description
    router = TaskRouterPolicy(composition, composition.tokenizer, composition.adapters)
    real_classify = router.classify
    calls: list[tuple[list[int], int]] = []

    def spy(prompt):  # wraps the real classifier, replaces nothing
        slot = real_classify(prompt)
        calls.append((list(prompt), slot))
        return slot

    router.classify = spy
    _collect(router, EPISODES)
    first_prompts = [p for p, _ in calls]
    # a base that routes by task: lookup tasks to slot 1, chat to 2, echo to 3
    base, tok = load_model(compose_base)
    wanted = [1, 3, 2]
    _fit_base_to_route(base, tok, router, first_prompts, wanted)
    _load_backbone(composition, base)

    router = TaskRouterPolicy(composition, composition.tokenizer, composition.adapters)
    real_classify = router.classify
    calls.clear()
    router.classify = spy
    trajs = _collect(router, EPISODES)
    assert len(calls) == len(EPISODES)  # once per episode, on its first prompt; later turns reuse it
    assert [slot for _, slot in calls] == wanted
    for prompt, slot in calls:  # the router's choice is the plain base's, adapters and gates out of the way
        assert slot == _zero_shot_slot(base, tok, router, prompt)

    # each episode is exactly the episode of the composed model forced to the chosen slot
    by_first_prompt = {tuple(p): s for p, s in calls}
    for traj, episode in zip(trajs, EPISODES, strict=True):
        slot = next(s for p, s in by_first_prompt.items() if tuple(traj.token_ids[: len(p)]) == p)
        alone = _collect(SlotPolicy(composition, composition.tokenizer, slot), [episode])[0]
        assert traj.token_ids == alone.token_ids
    assert sum(router.episode_slots.values()) == len(EPISODES)

    # the evaluation stage's per-task routes, read back from the episode records by a fresh router, are these
    from trace_gym.registration import make_env, tools_of
    from trace_train.compose.compare import router_routes

    def tools(env_id: str, seed: int) -> list:  # as the evaluation records them: the tools of the reset task
        env = make_env(env_id)
        return tools_of(env, env.reset(seed=seed)[1])

    records = [
        {**traj.to_json(), "tools": tools(env_id, seed)}
        for traj, (env_id, seed) in zip(trajs, EPISODES, strict=True)
    ]
    fresh = TaskRouterPolicy(composition, composition.tokenizer, composition.adapters)
    routes = router_routes(fresh, records)
    assert routes == {seed: composition.slot_names[s] for (_, seed), s in zip(EPISODES, wanted, strict=True)}

    # the episodes the router need not play: on each task, the row of the slot it chose, where that row was played
    from trace_train.compose.compare import router_reuse

    names = composition.slot_names
    rows = {"base": records, names[1]: [{**r, "model": names[1]} for r in records]}
    rows[names[3]] = [{**r, "model": names[3]} for r in records[:1]]  # a shorter row: its first task only
    routes_again, reuse = router_reuse(fresh, rows)
    assert routes_again == routes
    by_seed = {r["seed"]: r for r in reuse}
    assert set(by_seed) == {EPISODES[0][1]}  # task 0 went to names[1]; task 1 to names[3], not in its row
    assert by_seed[EPISODES[0][1]]["model"] == names[1]

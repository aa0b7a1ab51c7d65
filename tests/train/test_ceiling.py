"""The oracle's ceiling under a run's caps (trace_train/ceiling.py), and the refusals built on it."""

from __future__ import annotations

import json

import pytest

from tests.train.toy_envs import LookupEnv  # noqa: F401  (registers traintest/*)
from trace_train.ceiling import CeilingError, oracle_ceiling, require_ceiling

LOOKUP = "tests.train.toy_envs:traintest/lookup-v0"


class CharRenderer:
    """One token per character: turn lengths a test can count by hand."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


class ProseOnlyRenderer:
    """A tool call is one token, prose one per character: the oracle's answer (its last turn) is the longest."""

    def encode(self, text: str) -> list[int]:
        return [0] if text.startswith("<tool_call>") else [ord(c) for c in text]


def lookup_turns(key: str, value: str) -> list[int]:
    """The lookup oracle's two turns in characters, written out by hand: the call, then the answer."""
    call = '<tool_call>{"name": "lookup", "arguments": {"key": "' + key + '"}}</tool_call>'
    return [len(call), len(f"The value is {value}.")]


def hand_counts(tasks: int) -> list[list[int]]:
    from trace_gym.registration import make_env
    from trace_gym.seeds import train_reset_seed

    env = make_env(LOOKUP)
    out = []
    for i in range(tasks):
        env.reset(seed=train_reset_seed(i, env), options={"split": "train"})
        out.append(lookup_turns(env.unwrapped.key, env.unwrapped.value))
    return out


def test_ceiling_counts_each_oracle_turn_and_the_turns():
    counts = hand_counts(12)
    longest = max(max(c) for c in counts)
    full = oracle_ceiling(
        CharRenderer(), LOOKUP, tasks=12, difficulty=None, max_new_tokens=longest, max_turns=2
    )
    assert (full.fit, full.share, full.longest_turn, full.most_turns) == (12, 1.0, longest, 2)
    # one token short of the longest turn cuts exactly the tasks with a turn that long
    short = oracle_ceiling(
        CharRenderer(), LOOKUP, tasks=12, difficulty=None, max_new_tokens=longest - 1, max_turns=2
    )
    expected_cut = sum(max(c) > longest - 1 for c in counts)
    assert expected_cut >= 1
    assert (short.cut_by_tokens, short.cut_by_turns, short.fit) == (expected_cut, 0, 12 - expected_cut)
    # the lookup oracle needs two turns: a one-turn cap cuts every task
    one_turn = oracle_ceiling(
        CharRenderer(), LOOKUP, tasks=12, difficulty=None, max_new_tokens=longest, max_turns=1
    )
    assert (one_turn.cut_by_turns, one_turn.fit, one_turn.share) == (12, 0, 0.0)
    # every turn is counted, not only the first
    prose = oracle_ceiling(
        ProseOnlyRenderer(), LOOKUP, tasks=12, difficulty=None, max_new_tokens=longest, max_turns=2
    )
    assert prose.longest_turn == max(c[1] for c in counts)


def test_env_without_oracle_has_no_ceiling():
    ceiling = oracle_ceiling(
        CharRenderer(),
        "tests.train.toy_envs:traintest/parity-v0",
        tasks=4,
        difficulty=None,
        max_new_tokens=1,
        max_turns=1,
    )
    assert ceiling is None
    require_ceiling(ceiling, 1.0, "anything")  # nothing to check: no error


def test_require_ceiling_names_the_cap_and_the_value_that_fits():
    counts = hand_counts(8)
    longest = max(max(c) for c in counts)
    ceiling = oracle_ceiling(CharRenderer(), LOOKUP, tasks=8, difficulty=None, max_new_tokens=10, max_turns=1)
    with pytest.raises(CeilingError) as err:
        require_ceiling(ceiling, 0.9, "GRPO on lookup")
    text = str(err.value)
    assert "GRPO on lookup" in text and "0/8" in text
    assert f"max_new_tokens >= {longest}" in text and "max_turns >= 2" in text
    require_ceiling(ceiling, 0.0, "GRPO on lookup")  # 0: never refuse


def test_calibration_refuses_caps_that_cut_the_oracle_before_any_episode(tiny_policy):
    from trace_train.calibrate import calibrate
    from trace_train.config import CalibrationSettings

    settings = CalibrationSettings(seeds=2, group_size=2, max_turns=1, max_new_tokens=8)
    with pytest.raises(CeilingError, match="max_turns 1 ends the oracle.s own episode early on 2 task"):
        calibrate(LOOKUP, tiny_policy, settings, model_name="tiny")
    # switched off, it runs and records the ceiling it measured per level
    settings = CalibrationSettings(seeds=2, group_size=2, max_turns=1, max_new_tokens=8, min_oracle_ceiling=0)
    result = calibrate(LOOKUP, tiny_policy, settings, model_name="tiny")
    assert [level.oracle_ceiling for level in result.levels] == [0.0]
    assert result.to_spec()["levels"][0]["oracle_ceiling"] == 0.0


def test_grpo_refuses_caps_that_cut_the_oracle(tiny_model_dir, tmp_path):
    from tests.train.levels_args import levels_args
    from trace_train.grpo.trainer import GRPOTrainer

    common = dict(env_id=LOOKUP, groups_per_step=1, group_size=2, max_new_tokens=8)  # one turn, 8 tokens
    with pytest.raises(CeilingError, match="GRPO on .*lookup-v0"):
        GRPOTrainer(levels_args(tiny_model_dir, tmp_path / "run", **common))
    GRPOTrainer(levels_args(tiny_model_dir, tmp_path / "run", **common, min_oracle_ceiling=0))  # switched off


def test_evaluation_refuses_caps_that_cut_the_oracle_and_records_the_ceiling(tiny_policy, tmp_path):
    from trace_train.config import EvalSettings
    from trace_train.evaluate import evaluate

    out = tmp_path / "eval.jsonl"
    with pytest.raises(
        CeilingError,
        match="evaluating on .*lookup-v0.*max_turns 1 ends the oracle.s own episode early on 16 task",
    ):
        evaluate(tiny_policy, LOOKUP, EvalSettings(episodes=2, max_turns=1, max_new_tokens=8), out_jsonl=out)
    assert not out.exists()  # refused before any episode ran
    result = evaluate(tiny_policy, LOOKUP, EvalSettings(episodes=2, max_turns=2, max_new_tokens=256))
    ceiling = result.summary()["oracle_ceiling"]
    assert (ceiling["tasks"], ceiling["fit"], ceiling["max_turns"]) == (16, 16, 2)
    off = evaluate(tiny_policy, LOOKUP, EvalSettings(episodes=2, max_turns=1, min_oracle_ceiling=0))
    assert off.episodes == 2 and off.oracle_ceiling is None


def test_step1_rollouts_refuse_caps_that_cut_the_oracle(tiny_model_dir, tmp_path):
    """Failures under such caps would be read by step 1 as missing capabilities."""
    from trace_train.base_rollouts import RolloutArgs, RolloutError, rollout

    common = dict(env_id=LOOKUP, model=str(tiny_model_dir), episodes=2, max_turns=1, max_new_tokens=8)
    with pytest.raises(RolloutError, match="rolling out on .*lookup-v0.*set max_turns >= 2"):
        rollout(RolloutArgs(**common, out=str(tmp_path / "cut")))
    assert not (tmp_path / "cut").exists()  # a refused run leaves no output folder
    summary = rollout(RolloutArgs(**common, out=str(tmp_path / "off"), min_oracle_ceiling=0))
    assert summary.written == 2


def test_caps_left_out_are_fitted_to_the_oracle(tiny_policy, tiny_model_dir, tmp_path):
    """Every command runs as typed without caps: they come from the env's oracle, in the policy's own tokens,
    with the documented margin; given caps are kept."""
    from trace_train.base_rollouts import RolloutArgs, rollout
    from trace_train.ceiling import TOKEN_MARGIN, TURN_MARGIN, auto_caps, fill_caps, oracle_ceiling
    from trace_train.config import EvalSettings
    from trace_train.evaluate import evaluate

    measured = oracle_ceiling(
        tiny_policy.renderer, LOOKUP, tasks=64, difficulty=None, max_new_tokens=10**9, max_turns=10**9
    )
    tokens, turns = auto_caps(tiny_policy.renderer, LOOKUP, None)
    assert turns == measured.most_turns + TURN_MARGIN
    assert measured.longest_turn * TOKEN_MARGIN <= tokens < measured.longest_turn * TOKEN_MARGIN + 32
    assert tokens % 32 == 0
    given = EvalSettings(max_turns=1, max_new_tokens=8)
    assert fill_caps(given, tiny_policy.renderer, LOOKUP, None) == given
    half = fill_caps(EvalSettings(max_turns=5), tiny_policy.renderer, LOOKUP, None)
    assert (half.max_turns, half.max_new_tokens) == (5, tokens)
    result = evaluate(tiny_policy, LOOKUP, EvalSettings(episodes=2))  # no caps given: not refused
    assert (result.oracle_ceiling["max_turns"], result.oracle_ceiling["fit"]) == (turns, 16)
    summary = rollout(
        RolloutArgs(env_id=LOOKUP, model=str(tiny_model_dir), episodes=2, out=str(tmp_path / "r"))
    )
    assert summary.written == 2
    run = json.loads((tmp_path / "r" / "rollout.json").read_text())
    assert run["max_turns"] is None and run["caps"] == {"max_turns": turns, "max_new_tokens": tokens}

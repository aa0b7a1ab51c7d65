"""Content-level splits (trace_gym.core.splits) on a ChatToolEnv that opts in, and the validation check."""

from __future__ import annotations

import gymnasium as gym
import pytest

from tests.toy_library import LibraryEnv
from trace_gym.core.splits import SplitExhaustedError, draw_in_split, split_of_key, split_overlap
from trace_gym.core.validation import ValidationConfig, check_split_overlap


class SplitLibraryEnv(LibraryEnv):
    """The toy library with a content split keyed by (member, title): 8 x 9 = 72 distinct tasks."""

    content_split = True

    def task_key(self) -> str:
        member = self.episode.state["members"][self.target["member_id"]]["name"]
        return f"{member}|{self.episode.state['books'][self.target['book_id']]['title']}"


class OneTaskEnv(SplitLibraryEnv):
    def task_key(self) -> str:
        return "always the same task"


def _keys(env: gym.Env, split: str, n: int) -> list[str]:
    out = []
    for seed in range(n):
        env.reset(seed=seed, options={"split": split})
        out.append(env.task_key())
    return out


def test_split_of_key_share_and_stability():
    keys = [f"task {i}" for i in range(20_000)]
    share = sum(split_of_key(k) == "test" for k in keys) / len(keys)
    assert 0.19 < share < 0.21
    assert split_of_key("task 7") == split_of_key("task 7")
    with pytest.raises(ValueError, match="test_share"):
        split_of_key("x", test_share=1.0)


def test_seed_split_repeats_tasks_content_split_does_not():
    """The defect: on a small task family, disjoint seed ranges still share tasks between the splits."""
    seed_only, content = LibraryEnv(), SplitLibraryEnv()

    def seed_split_keys(split: str, n: int) -> list[str]:
        out = []
        for seed in range(n):
            seed_only.reset(seed=seed, options={"split": split})
            out.append(SplitLibraryEnv.task_key(seed_only))
        return out

    assert (
        split_overlap(seed_split_keys("train", 300), seed_split_keys("test", 100)).overlapping_instances > 50
    )
    overlap = split_overlap(_keys(content, "train", 300), _keys(content, "test", 100))
    assert overlap.overlapping_instances == 0 and overlap.test_keys >= 5, overlap.figure


def test_content_split_is_deterministic_and_oracle_still_solves():
    a, b = SplitLibraryEnv(), SplitLibraryEnv()
    for seed in range(5):
        for split in ("train", "test"):
            obs_a, _ = a.reset(seed=seed, options={"split": split})
            obs_b, _ = b.reset(seed=seed, options={"split": split})
            assert obs_a == obs_b and a.render_instance() == b.render_instance()
            assert split_of_key(a.task_key()) == split
            for action in a.oracle_actions():
                _, reward, terminated, truncated, _ = a.step(action)
                if terminated or truncated:
                    break
            assert reward == 1.0
    # without a split option the seed's range decides, so raw test seeds draw test tasks only
    a.reset(seed=1_000_003)
    assert split_of_key(a.task_key()) == "test"


def test_opt_in_only_and_too_small_family_fails_clearly():
    plain, opted = LibraryEnv(), SplitLibraryEnv()
    plain.reset(seed=11, options={"split": "train"})
    unsplit = LibraryEnv()
    unsplit.reset(seed=11)  # envs that do not opt in draw exactly what they drew before (golden hashes)
    assert plain.render_instance() == unsplit.render_instance()
    opted.reset(seed=11, options={"split": "train"})
    assert opted.content_split and not plain.content_split
    one = OneTaskEnv()
    wrong = "test" if split_of_key("always the same task") == "train" else "train"
    with pytest.raises(SplitExhaustedError, match="too few distinct tasks"):
        one.reset(seed=0, options={"split": wrong})
    with pytest.raises(ValueError, match="unknown split"):
        draw_in_split(lambda: 1, str, "valid")


def test_validation_reports_overlap():
    gym.register("trace/test-split-library-v0", entry_point=SplitLibraryEnv)
    try:
        ok = check_split_overlap("trace/test-split-library-v0", {}, ValidationConfig(seeds=20))
        assert ok.passed and ok.figure.startswith("0/20 test instances in train"), ok
    finally:
        del gym.registry["trace/test-split-library-v0"]


def test_validation_fails_on_overlap(monkeypatch):
    """An env whose test tasks repeat train tasks fails the check (the key here ignores the split)."""
    monkeypatch.setattr(SplitLibraryEnv, "content_split", False)
    gym.register("trace/test-overlap-library-v0", entry_point=SplitLibraryEnv)
    try:
        bad = check_split_overlap("trace/test-overlap-library-v0", {}, ValidationConfig(seeds=40))
        assert not bad.passed and not bad.figure.startswith("0/"), bad
    finally:
        del gym.registry["trace/test-overlap-library-v0"]


# ----- issue 31: an independent overlap key, not the key that assigns the split --------------------------------
class ArithQuestionEnv(gym.Env):
    """A one-question env over a small arithmetic family whose questions come in redundant forms: ``a - b``,
    ``( a - b )``, ``( ( ( a - b ) ) )`` and ``-b + a``. ``key`` assigns the content split."""

    content_split = True
    key = "text"  # "text": the expression's text (too fine); "canonical": reasoning-gym's expression_key

    def __init__(self):
        self.observation_space = gym.spaces.Text(200)
        self.action_space = gym.spaces.Text(200)

    def reset(self, *, seed=None, options=None):
        from trace_gym.core.env import split_seed

        split = (options or {}).get("split", "train")
        super().reset(seed=split_seed(seed, split))

        def draw():
            a, b = (int(x) for x in self.np_random.integers(1, 10, size=2))
            forms = [f"{a} - {b}", f"( {a} - {b} )", f"( ( ( {a} - {b} ) ) )", f"-{b} + {a}"]
            return forms[int(self.np_random.integers(len(forms)))]

        self.expression, _ = draw_in_split(draw, self._key, split)
        self.entry = {"question": f"Calculate {self.expression}."}
        return self.entry["question"], {}

    def _key(self, expression: str) -> str:
        from trace_gym.adapters.reasoning_gym import expression_key

        return expression if self.key == "text" else expression_key(expression)

    def task_key(self) -> str:
        return self._key(self.expression)

    def render_instance(self) -> str:
        return self.entry["question"]

    def step(self, action):
        return "done", 0.0, True, False, {}


def test_independent_key_finds_the_overlap_the_split_key_hides(monkeypatch):
    """Split by the expression's text, no test key occurs in train, yet "( 7 - 2 )" in test is "7 - 2" in train:
    the independent key (the expression as a function of its literals) finds it and the check fails. Split by
    the canonical key, both keys give 0."""
    from trace_gym.core import validation
    from trace_gym.core.overlap import arithmetic_key

    assert arithmetic_key("Calculate ( ( ( -2 - 4 ) ) ).") == arithmetic_key("Calculate -4 + -2.")
    assert arithmetic_key("Calculate 3 * ( 4 + 1 ).") == arithmetic_key("Calculate ( 1 + 4 ) * 3.")
    assert arithmetic_key("Calculate -6 / 1 + 1.") != arithmetic_key("Calculate 1 / 1 + -6.")  # same value
    assert arithmetic_key("Calculate 2 - 4.") != arithmetic_key("Calculate 4 - 2.")

    monkeypatch.setattr(validation, "_make", lambda env_id, kwargs: ArithQuestionEnv())
    config = ValidationConfig(seeds=40)
    monkeypatch.setattr(ArithQuestionEnv, "key", "text")
    fine = check_split_overlap("arith", {}, config)
    assert not fine.passed and fine.figure.startswith("0/40 test instances in train"), fine.figure
    assert "independent key: 0/" not in fine.figure, fine.figure
    monkeypatch.setattr(ArithQuestionEnv, "key", "canonical")
    fixed = check_split_overlap("arith", {}, config)
    assert fixed.passed and "independent key: 0/40" in fixed.figure, fixed.figure

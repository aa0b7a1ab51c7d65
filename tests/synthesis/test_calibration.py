"""trace calibrate: the statistics by hand, then a real run with the tiny model that writes the spec."""

from __future__ import annotations

import json
import shutil

import pytest

from trace_gym.synthesis.calibration import Bands, choose_level, level_stats, pass_at_k, write_calibration
from trace_train.calibrate import calibrate, prompt_tokens
from trace_train.config import CalibrationSettings

# a derived env emitted into generated_envs/ (BFCL's smallest source pool: cheap to scan)
ENV_ID = "trace/bfcl-multi-turn-missing-function-awareness-v0"
PACKAGE = "bfcl_multi_turn_missing_function_awareness"


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 1, 1) == 0.25
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 3, 2) == 1.0


def test_level_stats_by_hand():
    groups = [[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.5, 0.0]]
    stats = level_stats(2, groups, turns=[3, 3, 4, 4, 5, 5, 6, 6])
    assert stats.mean_reward == pytest.approx(3.5 / 8)
    assert stats.success == pytest.approx(3 / 8)
    assert stats.pass_at_k == {"1": pytest.approx(3 / 8), "2": pytest.approx(2 / 4)}
    assert (stats.all_success_share, stats.all_zero_share, stats.informative_share) == (0.25, 0.25, 0.5)
    assert stats.mean_turns == 4.5
    with pytest.raises(ValueError, match="same non-zero size"):
        level_stats(1, [[1.0], [1.0, 0.0]])


def test_choose_level_prefers_the_band_then_the_lower_level():
    easy = level_stats(1, [[1.0, 1.0]] * 4)  # all success: no signal
    middle = level_stats(2, [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    hard = level_stats(3, [[0.0, 0.0]] * 4)
    bands = Bands()
    assert bands.distance(middle) == 0.0 and bands.distance(easy) > 0 and bands.distance(hard) > 0
    assert choose_level([easy, middle, hard]).level == 2
    assert choose_level([hard, easy]).level == 3  # 0.2 + 0.2 + 0.5 away against 0.4 + 0.4 + 0.5
    flat = level_stats(1, [[0.8, 0.8]] * 4)  # mean 0.2 above, success 0.2 below, no signal: as far as hard
    assert bands.distance(flat) == pytest.approx(bands.distance(hard))
    assert choose_level([hard, flat]).level == 1


def test_calibrate_with_the_tiny_model_writes_the_spec(tiny_policy, tmp_path):
    from pathlib import Path

    import generated_envs

    result = calibrate(
        ENV_ID,
        tiny_policy,
        # 8 tokens and 2 turns cut the oracle everywhere (the tiny model is random anyway): the refusal is off
        CalibrationSettings(
            seeds=2, group_size=2, levels=[1, 2], max_new_tokens=8, max_turns=2, min_oracle_ceiling=0
        ),
        model_name="tiny",
    )
    assert [s.level for s in result.levels] == [1, 2]
    assert all(s.groups == 2 and s.group_size == 2 for s in result.levels)
    assert result.chosen.level in (1, 2)
    assert result.prompt_tokens == prompt_tokens(tiny_policy, ENV_ID) > 100
    spec_file = tmp_path / "spec.json"
    shutil.copy(Path(generated_envs.__file__).parent / PACKAGE / "spec.json", spec_file)
    spec = write_calibration(spec_file, result)
    assert json.loads(spec_file.read_text()) == spec
    assert spec["calibration"]["level"] == spec["difficulty"]["default"] == result.chosen.level
    assert {row["level"] for row in spec["calibration"]["levels"]} == {1, 2}
    assert all(row["oracle_ceiling"] == 0.0 for row in spec["calibration"]["levels"])  # measured, recorded

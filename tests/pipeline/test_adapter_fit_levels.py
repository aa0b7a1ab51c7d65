"""``[adapters.sft] levels`` spread a capability env's oracle fit over start depths; the fit on the target
(direct GRPO's, ``sft_levels=[]``) stays at the target's own difficulty."""

from __future__ import annotations

import pytest

import trace_train.grpo.trainer
import trace_train.sft
from tests.pipeline.test_isolation import ENV, MODEL, context
from trace_train.pipeline.stages import adapters


class _Stop(Exception):
    pass


@pytest.mark.parametrize(("sft_levels", "levels", "difficulty"), [(None, [1, 2, 3, 4], None), ([], [], 2)])
def test_the_oracle_fit_takes_the_levels_it_is_given(tmp_path, monkeypatch, sft_levels, levels, difficulty):
    fits = []

    def fake_run_sft(args):
        fits.append(args)
        (tmp_path / "fit" / "sft" / "adapter").mkdir(parents=True)
        return {"adapter": str(tmp_path / "fit" / "sft" / "adapter")}

    def no_grpo(args):
        raise _Stop  # the fit is what is under test

    monkeypatch.setattr(trace_train.sft, "run_sft", fake_run_sft)
    monkeypatch.setattr(trace_train.grpo.trainer, "GRPOTrainer", no_grpo)
    data = {"adapters": {"steps": 1, "sft": {"episodes": 4, "levels": [1, 2, 3, 4]}}}
    ctx = context(tmp_path, data, MODEL)
    with pytest.raises(_Stop):
        adapters.train_adapter(ctx, "under test", ENV, tmp_path / "fit", 2, 1, sft_levels=sft_levels)
    (args,) = fits
    assert (args.levels, args.difficulty) == (levels, difficulty)
    summary = adapters._sft_warmup(ctx, "again", ENV, tmp_path / "fit" / "sft", 2, 4, levels)
    assert summary["levels"] == (levels or [2])  # what the report prints: reused, not refitted
    assert len(fits) == 1

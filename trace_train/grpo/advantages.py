"""Group-relative advantages: every group shares one seed (one task), so the group mean is its baseline."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch


def group_advantages(
    rewards: Sequence[float], groups: Sequence[int], scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """A_i = r_i - mean(group) [/ (std(group) + eps)].

    ``scale_by_std=False`` is Dr. GRPO's unbiased form. The std is the population std (ddof=0) so a group
    of two rewards {0, 1} gives advantages of exactly -1 and +1 (up to eps).
    """
    r = torch.as_tensor(list(rewards), dtype=torch.float64)
    adv = torch.zeros_like(r)
    members: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    for idx in members.values():
        rg = r[idx]
        centred = rg - rg.mean()
        adv[idx] = centred / (rg.std(unbiased=False) + eps) if scale_by_std else centred
    return adv.float()


def informative_groups(rewards: Sequence[float], groups: Sequence[int], tol: float = 1e-9) -> dict[int, bool]:
    """Per group: False when every reward is equal (zero advantage, no gradient signal)."""
    members: dict[int, list[float]] = defaultdict(list)
    for r, g in zip(rewards, groups, strict=True):
        members[g].append(float(r))
    return {g: (max(rs) - min(rs)) > tol for g, rs in members.items()}

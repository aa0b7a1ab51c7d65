"""What keeps a small agent's GRPO groups informative (issue 29): the adaptive start depth, the reward choice.

**Adaptive start depth (reverse curriculum).** An env that declares integer levels
(``env.unwrapped.difficulty_levels``, reset with ``options={"difficulty": k}``) is read easiest first: the
levels sorted ascending, the highest being the full task (on a target-derived env, the deepest start). The
trainer keeps a running success estimate per (env id, level): an exponential moving average over groups,
``p <- (1 - ema) * p + ema * s`` where ``s`` is the share of a group's *un-hinted* rollouts that succeeded
(reward >= 1); the first group at a level sets ``p = s``. The groups a round plays at one level are one
update, their rollouts pooled, with the weight of as many groups (``1 - (1 - ema)^n``): a round's groups are
exchangeable, and one update per group made the estimate depend on their order (4/4 then 0/4 gave 0.7, the
reverse 0.3). Every un-hinted rollout updates it, also those of groups that dynamic sampling later throws away
(keeping only the informative ones would bias it upward). An EMA rather than a Beta posterior: the policy
changes under the estimate, and an EMA forgets old evidence at a fixed rate, where a posterior's counts would
make it ever slower to move.

A new group's level (candidates: the levels tried so far, plus the next harder one once the hardest tried
level's estimate reaches ``advance``, assumed to be at ``target`` and so tried next; before any estimate, the
start level: the easiest, or ``--difficulty``):

1. among candidates that are not *saturated*, the one whose estimate is closest to ``target`` (0.5: a group of G
   rollouts is then informative with probability 1 - 2 * 0.5^G), ties going to the harder level;
2. when every candidate is saturated, the easiest one the agent fails (or the hardest, if it masters them all).

``advance`` (0.75) lies above ``target`` on purpose: a level near the target is where groups carry the most
gradient, and leaving it for an untried rung spends a group on a guess. The demo's precise-arguments fit sat at
0.55 on level 1 (8 samples of 12 tasks) and scored 0 on level 2: with the rung opening at the target, every
round after the first would have spent a group there. Reverse-curriculum RL keeps a start while its success is
well inside (0, 1) (Florensa et al. 2017 keep starts with success in [0.1, 0.9]) and moves on as it is mastered.

A round of several groups tries an untried level with its first group only; the others play the level the rule
picks among the levels tried so far. An untried level's estimate is an assumption, and the next rung back can be
a cliff: on the demo's precise-arguments env the all-together arm moved every group of its second step (12 of
its 24 rollouts, rescues included) to level 2 after one round at level 1, and all of them scored 0.

A level is saturated when its estimate lies within 1/(2G) of 0 (*failed*) or 1 (*mastered*): fewer than one
success (or failure) expected in two groups, so its groups almost never carry a gradient. Rule 2 is what
moves a run on from a level it has mastered to a harder one it failed earlier (that estimate is stale: it was
measured on an older adapter), and back to the easiest failed level when everything fails. A run therefore
starts easy, stays where the agent succeeds about half the time, and climbs toward the full task as the adapter
improves.

**Reward choice.** ``success`` (the env's reward), ``shaped`` (the env's declared shaped reward: a class
attribute ``shaped_reward_key`` naming an entry of ``info["reward_components"]``), or ``mix:ALPHA``
(``ALPHA * shaped + (1 - ALPHA) * success``). The trainer never invents a shaping: an env that declares no
key is refused before any rollout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CURRICULA = ("fixed", "adaptive")


def success_of(reward: float) -> bool:
    """A rollout succeeded when the env's (terminal, [0, 1]) reward is full: the trainer's ``success_rate``."""
    return reward >= 1.0


def env_levels(env: Any) -> list[int]:
    """The env's integer difficulty levels, easiest first; [] when it declares none."""
    levels = getattr(getattr(env, "unwrapped", env), "difficulty_levels", None)
    if not levels:
        return []
    if any(isinstance(k, bool) or not isinstance(k, int) for k in levels):
        raise ValueError(f"difficulty_levels must be integers, got {list(levels)!r}")
    return sorted(set(levels))


class LevelCurriculum:
    """Per (env id, level) success estimates and the level rule of the module docstring."""

    def __init__(
        self,
        env_id: str,
        levels: list[int],
        target: float = 0.5,
        ema: float = 0.3,
        advance: float = 0.75,
        start: int | None = None,
        group_size: int = 8,
    ):
        if not levels:
            raise ValueError(
                f"--curriculum adaptive needs an env that declares integer levels "
                f"(env.unwrapped.difficulty_levels); {env_id} declares none"
            )
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"--curriculum-ema must be in (0, 1], got {ema}")
        if not 0.0 < advance <= 1.0:
            raise ValueError(f"--curriculum-advance must be in (0, 1], got {advance}")
        if start is not None and start not in levels:
            raise ValueError(f"--difficulty {start} is not one of {env_id}'s levels {list(levels)}")
        self.env_id, self.levels, self.target, self.ema = env_id, list(levels), target, ema
        self.advance = advance
        self.start = levels[0] if start is None else start  # the level tried before any estimate
        self.saturation = 1.0 / (2 * group_size)
        self.estimates: dict[str, dict[int, float]] = {}  # env id -> level -> EMA of group success

    def estimate(self, level: int, env_id: str | None = None) -> float | None:
        return self.estimates.get(env_id or self.env_id, {}).get(level)

    def update(
        self, level: int | None, successes: int, count: int, env_id: str | None = None, groups: int = 1
    ) -> None:
        """The un-hinted rollouts of ``groups`` groups of one round at ``level``: ``successes`` of ``count``."""
        if count <= 0 or groups <= 0:
            return
        table = self.estimates.setdefault(env_id or self.env_id, {})
        key = -1 if level is None else level  # -1: the env's default level (a mixed-in target)
        s = successes / count
        weight = 1.0 - (1.0 - self.ema) ** groups  # as much as that many one-group updates would move it
        table[key] = s if key not in table else (1.0 - weight) * table[key] + weight * s

    def choose_round(self, n: int) -> list[int]:
        """The levels of a round of ``n`` groups: an untried level gets the first group only (module docstring)."""
        level = self.choose()
        if n < 2 or level in self.estimates.get(self.env_id, {}) or not self.estimates.get(self.env_id):
            return [level] * n
        return [level] + [self.choose(explore=False)] * (n - 1)

    def choose(self, explore: bool = True) -> int:
        """The level of the next group (module docstring); ``explore=False``: among the levels tried so far."""
        est = self.estimates.get(self.env_id, {})
        seen = [k for k in self.levels if k in est]
        if not seen:
            return self.start
        cands = {k: est[k] for k in seen}
        hardest = max(seen)
        harder = [k for k in self.levels if k > hardest]
        if explore and harder and est[hardest] >= self.advance:
            cands[harder[0]] = self.target
        s = self.saturation
        open_ = [k for k, p in cands.items() if s <= p <= 1.0 - s]
        if open_:
            return min(open_, key=lambda k: (abs(cands[k] - self.target), -k))
        failed = sorted(k for k, p in cands.items() if p < s)
        return failed[0] if failed else max(cands)

    def metrics(self) -> dict[str, float]:
        est = self.estimates.get(self.env_id, {})
        return {f"level_success_est_{k}": est[k] for k in self.levels if k in est}

    def state_dict(self) -> dict[str, Any]:
        return {env: dict(table) for env, table in self.estimates.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.estimates = {env: {int(k): float(v) for k, v in t.items()} for env, t in state.items()}


@dataclass(frozen=True)
class RewardChoice:
    """``success``, ``shaped`` or ``mix:ALPHA``, parsed; :meth:`of` scores one rollout."""

    mode: str
    alpha: float = 0.0  # the shaped reward's weight (1 for ``shaped``, 0 for ``success``)

    @classmethod
    def parse(cls, text: str) -> RewardChoice:
        if text == "success":
            return cls("success", 0.0)
        if text == "shaped":
            return cls("shaped", 1.0)
        if text.startswith("mix:"):
            try:
                alpha = float(text[4:])
            except ValueError:
                alpha = math.nan
            if not 0.0 <= alpha <= 1.0:
                raise ValueError(f"--reward mix:ALPHA needs ALPHA in [0, 1], got {text!r}")
            return cls("mix", alpha)
        raise ValueError(f"--reward must be success, shaped or mix:ALPHA, got {text!r}")

    @property
    def needs_shaped(self) -> bool:
        return self.alpha > 0.0

    def shaped_key(self, env: Any, env_id: str, required: bool = True) -> str | None:
        """The env's declared shaped key; refused (ValueError) when this choice needs one and it has none."""
        key = getattr(getattr(env, "unwrapped", env), "shaped_reward_key", None)
        if self.needs_shaped and not key and required:
            raise ValueError(
                f"--reward {self.mode} needs an env that declares a shaped reward (a class attribute "
                f"shaped_reward_key naming an entry of info['reward_components']); {env_id} declares none. "
                "Use --reward success."
            )
        return key or None

    def of(self, reward: float, info: dict[str, Any], key: str | None) -> float:
        """The training reward of a rollout with env reward ``reward`` and final ``info``. A rollout cut before
        the env scored it (no ``reward_components``) has shaped reward 0."""
        if not self.needs_shaped or key is None:
            return float(reward)
        shaped = float((info.get("reward_components") or {}).get(key, 0.0))
        return self.alpha * shaped + (1.0 - self.alpha) * float(reward)

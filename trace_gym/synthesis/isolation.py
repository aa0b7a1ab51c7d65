"""The isolation matrix: does each capability env need its own capability, and (mostly) only that one?

For every env and every scripted agent "oracle minus one capability" (``env.oracle_actions(without=c)``, the
same agents step 1 uses on the target), the mean reward over seeds. An agent whose script ends before the
episode does keeps saying goodbye until the user ends it (or the turn limit does), so every episode ends
with a verdict. The diagonal (lacking the env's own capability) must be low (<= 0.2), the rest high (>= 0.8)
except where an env's card declares a genuine dependency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

CLOSING = "Thank you, goodbye."
ABBREVIATIONS = {
    "precondition-checking": "PC",
    "structured-reasoning": "SR",
    "multi-step-completion": "MS",
    "precise-arguments": "PA",
    "information-gathering": "IG",
    "error-recovery": "ER",
    "policy-adherence": "PO",
}
DIAGONAL_MAX = 0.2
OFF_DIAGONAL_MIN = 0.8


def play(env: Any, actions: Sequence[Any], max_steps: int = 200) -> float:
    """Replay ``actions`` from the current reset, then say goodbye until the episode ends; the final reward."""
    steps = 0
    for action in [*actions]:
        _, reward, terminated, truncated, _ = env.step(action)
        steps += 1
        if terminated or truncated:
            return float(reward)
    while steps < max_steps:
        _, reward, terminated, truncated, _ = env.step(CLOSING)
        steps += 1
        if terminated or truncated:
            return float(reward)
    raise RuntimeError(f"the episode did not end within {max_steps} steps")


@dataclass
class IsolationMatrix:
    seeds: int
    capabilities: list[str]
    rows: dict[str, dict[str, float]] = field(default_factory=dict)  # env id -> lacking capability -> mean
    env_capability: dict[str, str] = field(default_factory=dict)
    dependencies: dict[str, dict[str, str]] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """Cells outside the bounds that no declared dependency explains."""
        found = []
        for env_id, row in self.rows.items():
            own = self.env_capability[env_id]
            for capability, value in row.items():
                if capability == "oracle":
                    if value != 1.0:
                        found.append(f"{env_id}: the oracle scores {value:.2f}, not 1.0")
                elif capability == own and value > DIAGONAL_MAX:
                    found.append(f"{env_id}: lacking {capability} still scores {value:.2f} > {DIAGONAL_MAX}")
                elif (
                    capability != own
                    and value < OFF_DIAGONAL_MIN
                    and capability not in self.dependencies.get(env_id, {})
                ):
                    found.append(
                        f"{env_id}: lacking {capability} scores {value:.2f} < {OFF_DIAGONAL_MIN} and the card "
                        "declares no dependency on it"
                    )
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "seeds": self.seeds,
            "capabilities": self.capabilities,
            "rows": self.rows,
            "env_capability": self.env_capability,
            "dependencies": self.dependencies,
            "problems": self.problems(),
        }

    def markdown(self) -> str:
        short = {
            c: ABBREVIATIONS.get(c) or "".join(w[0] for w in c.split("-")).upper() for c in self.capabilities
        }
        header = "| env \\ agent lacking | oracle | " + " | ".join(short[c] for c in self.capabilities) + " |"
        lines = [header, "|" + "---|" * (len(self.capabilities) + 2)]
        for env_id, row in self.rows.items():
            own = self.env_capability[env_id]
            cells = []
            for c in self.capabilities:
                text = f"{row[c]:.2f}"
                if c == own:
                    text = f"**{text}**"
                elif c in self.dependencies.get(env_id, {}):
                    text += "\u2020"
                cells.append(text)
            lines.append(f"| `{env_id}` | {row['oracle']:.2f} | " + " | ".join(cells) + " |")
        legend = ", ".join(f"{v} = {k}" for k, v in short.items())
        return (
            "\n".join(lines)
            + f"\n\n{legend}; bold: the env's own capability; \u2020: a declared dependency.\n"
        )


def isolation_matrix(
    env_ids: Sequence[str], seeds: int = 100, split: str = "train", make_kwargs: dict[str, Any] | None = None
) -> IsolationMatrix:
    """Mean reward of every "oracle minus one capability" agent on every env, over train seeds 0..seeds-1."""
    matrix: IsolationMatrix | None = None
    for env_id in env_ids:
        env = gym.make(env_id, **(make_kwargs or {})).unwrapped
        capabilities = list(getattr(env, "ablatable_capabilities", ()))
        if not capabilities:
            raise ValueError(f"{env_id} declares no ablatable_capabilities (oracle_actions(without=...))")
        if matrix is None:
            matrix = IsolationMatrix(seeds, capabilities)
        elif capabilities != matrix.capabilities:
            raise ValueError(f"{env_id} ablates {capabilities}, the others {matrix.capabilities}")
        rewards: dict[str, list[float]] = {c: [] for c in ["oracle", *capabilities]}
        for seed in range(seeds):
            for lacking in [None, *capabilities]:
                env.reset(seed=seed, options={"split": split})
                rewards[lacking or "oracle"].append(play(env, env.oracle_actions(without=lacking)))
        matrix.rows[env_id] = {c: float(np.mean(v)) for c, v in rewards.items()}
        matrix.env_capability[env_id] = env.capability
        matrix.dependencies[env_id] = dict(getattr(env, "dependencies", {}) or {})
        env.close()
    if matrix is None:
        raise ValueError("no env ids given")
    return matrix

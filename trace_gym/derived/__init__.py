"""Step 2, target-derived: capability envs that are the target itself, restricted (docs/derived.md).

* :mod:`~trace_gym.derived.env`: :class:`DerivedCapabilityEnv`, the env;
* :mod:`~trace_gym.derived.pool`: which train tasks of the target are its sources;
* :mod:`~trace_gym.derived.levels`: start depth as the difficulty ladder;
* :mod:`~trace_gym.derived.shaped`: the declared milestone reward;
* :mod:`~trace_gym.derived.registration`: ids ``trace/<target-name>-<capability>-v0`` (emitted into
  ``generated_envs/`` by ``trace synthesize``).
"""

from trace_gym.derived.registration import derived_id, register_derived

__all__ = ["derived_id", "register_derived"]

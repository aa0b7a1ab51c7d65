"""trace_gym: Gymnasium tool-use environments for capability-targeted agentic training.

Importing this package registers the built-in ``trace/...`` envs and every env that installed plugins
advertise through the ``trace_gym.envs`` entry-point group.
"""

from trace_gym.registration import load_plugins, register_env

__version__ = "0.1.0"


def _register_builtins() -> None:
    from trace_gym import targets
    from trace_gym.adapters.reasoning_gym import register_reasoning_gym_envs

    targets.register_envs()
    register_reasoning_gym_envs()  # only when reasoning-gym is installed; its import stays lazy


_register_builtins()
load_plugins()

from trace_gym.interop import vector as _vector  # noqa: E402, F401 - async gym.make_vec with chat observations

__all__ = ["__version__", "load_plugins", "register_env"]

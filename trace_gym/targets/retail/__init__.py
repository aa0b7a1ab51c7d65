"""``trace/retail-v0``: the procedurally generated retail customer-service target (see docs/retail.md)."""

from trace_gym.registration import register_env
from trace_gym.targets.retail.env import RetailEnv

register_env("trace/retail-v0", entry_point="trace_gym.targets.retail.env:RetailEnv")

__all__ = ["RetailEnv"]

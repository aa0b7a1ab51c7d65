"""The procedurally generated retail customer-service target, ``trace/retail-v2`` (see docs/retail.md).

v0 and v1 are retired (hedged answers, refused writes and wording-strict users); ``gym.make`` of their ids
answers that they are deprecated in favour of ``trace/retail-v2``.
"""

from trace_gym.registration import register_env
from trace_gym.targets.retail.env import RetailEnv

register_env("trace/retail-v2", entry_point="trace_gym.targets.retail.env:RetailEnv")

__all__ = ["RetailEnv"]

"""The procedurally generated retail customer-service target (see docs/retail.md).

``trace/retail-v1`` is the current version; ``trace/retail-v0`` stays registered, superseded (its scripted user
reads keywords and its verifier could be passed without doing the job), with its instances unchanged.
"""

import warnings

from trace_gym.registration import register_env
from trace_gym.targets.retail.env import RetailEnv
from trace_gym.targets.retail.env_v1 import RetailEnvV1

register_env("trace/retail-v0", entry_point="trace_gym.targets.retail.env:RetailEnv")
register_env("trace/retail-v1", entry_point="trace_gym.targets.retail.env_v1:RetailEnvV1")

# Gymnasium warns on every make of an id with a newer version; v0 stays usable (golden instances, earlier
# results) and is marked superseded in its description and the docs instead of on every make.
warnings.filterwarnings("ignore", message=r".*trace/retail-v0 is out of date", category=DeprecationWarning)

__all__ = ["RetailEnv", "RetailEnvV1"]

"""The deterministic catalog: one capability family per file, over retail's domain objects.

``FAMILIES`` maps a capability name to its env class; ``trace synthesize`` renders one sub-package per
selected capability that the catalog covers (the LLM generation agent handles the others).
"""

from __future__ import annotations

from trace_gym.synthesis.catalog.base import CAPABILITIES, CapabilityEnv
from trace_gym.synthesis.catalog.error_recovery import ErrorRecoveryEnv
from trace_gym.synthesis.catalog.information_gathering import InformationGatheringEnv
from trace_gym.synthesis.catalog.multi_step_completion import MultiStepCompletionEnv
from trace_gym.synthesis.catalog.policy_adherence import PolicyAdherenceEnv
from trace_gym.synthesis.catalog.precise_arguments import PreciseArgumentsEnv
from trace_gym.synthesis.catalog.precondition_checking import PreconditionCheckingEnv
from trace_gym.synthesis.catalog.structured_reasoning import StructuredReasoningEnv

FAMILIES: dict[str, type[CapabilityEnv]] = {
    cls.capability: cls
    for cls in (
        PreconditionCheckingEnv,
        StructuredReasoningEnv,
        MultiStepCompletionEnv,
        PreciseArgumentsEnv,
        InformationGatheringEnv,
        ErrorRecoveryEnv,
        PolicyAdherenceEnv,
    )
}
# The target envs each family's domain objects come from (tool names, schemas, policy wording).
TARGETS = ("trace/retail-v2",)

__all__ = ["CAPABILITIES", "FAMILIES", "TARGETS", "CapabilityEnv"]

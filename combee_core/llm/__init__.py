"""The LLM layer: role prompts, output parsing, the three roles over litellm, and the offline simulator.

Importing ``combee_core.llm`` (or its ``prompts``, ``parsing``, ``simulator`` and ``errors`` modules) does not import
litellm; ``LLMRoles`` imports it when created (unless it is given a ``responder``), and
``combee_core.llm.provider`` imports it.
"""

from combee_core.llm.config import LLMConfig, RoleConfig
from combee_core.llm.errors import LLMCallError, LLMError, LLMOutputError, PromptTooLarge
from combee_core.llm.roles import (
    LLMReply,
    LLMRequest,
    LLMRoles,
    RoleResult,
    call_key,
    reflection_id_for,
    register_offline_providers,
)
from combee_core.llm.simulator import SimulatorConfig, extract_lessons, format_lesson
from combee_core.models import CallRecord

__all__ = [
    "CallRecord",
    "LLMCallError",
    "LLMConfig",
    "LLMError",
    "LLMOutputError",
    "PromptTooLarge",
    "LLMReply",
    "LLMRequest",
    "LLMRoles",
    "RoleConfig",
    "RoleResult",
    "SimulatorConfig",
    "call_key",
    "extract_lessons",
    "format_lesson",
    "reflection_id_for",
    "register_offline_providers",
]

"""The model port, the model-string registry, and the test doubles."""

from tether.models.base import (
    Model,
    ModelProfile,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolChoice,
    allow_model_requests,
    check_model_requests_allowed,
    model_requests_allowed,
)
from tether.models.registry import known_prefixes, register_model_provider, resolve_model
from tether.models.select import ModelChoice, ModelNeeds, NoModelFits, choose_model

__all__ = [
    "Model",
    "ModelChoice",
    "ModelNeeds",
    "ModelProfile",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "NoModelFits",
    "ResponseDone",
    "StreamEvent",
    "TextDelta",
    "ToolCallDelta",
    "ToolChoice",
    "allow_model_requests",
    "check_model_requests_allowed",
    "choose_model",
    "known_prefixes",
    "model_requests_allowed",
    "register_model_provider",
    "resolve_model",
]

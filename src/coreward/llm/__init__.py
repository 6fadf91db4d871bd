"""Text-generation backends behind one interface: a local Hugging Face model or an OpenAI-compatible endpoint.

Used by Cooper's assistant (wrong-but-plausible solutions), the hybrid-annotation judge and the
Co-rewarding rephraser. See `base` for the contract (ordered results, per-item errors, running stats).
"""

from coreward.llm.base import GenerationRequest, GenerationResult, TextGenerator
from coreward.llm.factory import build_generator
from coreward.llm.hf_local import HFLocalGenerator
from coreward.llm.openai_endpoint import OpenAIEndpointGenerator


__all__ = [
    "GenerationRequest",
    "GenerationResult",
    "HFLocalGenerator",
    "OpenAIEndpointGenerator",
    "TextGenerator",
    "build_generator",
]

"""The embedder a setting names (``COMBEE_EMBEDDING_MODEL``): the offline MiniLM
(:mod:`~combee_core.playbook.onnx_embedding`), the offline static model or a hosted model through litellm
(:mod:`~combee_core.playbook.embedding`), or none (lexical curation)."""

from __future__ import annotations

from typing import Any

from combee_core.playbook.embedding import STATIC_MODEL, Embedder, EmbeddingError, LiteLLMEmbedder, StaticEmbedder
from combee_core.playbook.onnx_embedding import MINILM_MODEL, MiniLMEmbedder


def make_embedder(model: str, *, api_base: str | None = None, api_key: str | None = None,
                  timeout_s: float = 60.0) -> Embedder:
    """The embedder a setting names: an offline model for ``combee-onnx/...`` or ``combee-static/...``, else
    litellm."""
    if model == MINILM_MODEL:
        return MiniLMEmbedder()
    if model == STATIC_MODEL:
        return StaticEmbedder()
    if model.startswith(("combee-static/", "combee-onnx/")):
        raise EmbeddingError(f"unknown offline embedding model {model!r}; the ones shipped are {MINILM_MODEL!r} "
                             f"and {STATIC_MODEL!r}")
    return LiteLLMEmbedder(model, api_base=api_base, api_key=api_key, timeout_s=timeout_s)


def embedder_from(settings: Any) -> Embedder | None:
    """The embedder ``settings.embedding_model`` names (``CombeeSettings``), or None for ``none`` (lexical)."""
    model: str = settings.embedding_model
    if model.lower() == "none":
        return None
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key is not None else None
    return make_embedder(model, api_base=settings.llm_api_base, api_key=key, timeout_s=settings.llm_timeout_s)

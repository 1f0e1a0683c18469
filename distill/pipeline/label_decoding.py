"""The pipeline's `label_decoding` option: which roles rank their label rather than generate it.

`label_decoding: {sr: rank}` ranks the one label field of `sr`'s answer; `{plan.tone: rank-calibrated}` names the
field of a role whose answer has several. The ranking itself is the local backend's
(distill.backends.label_rank); this module checks the option against the pipeline's roles and the backend when the
pipeline is built, and builds each role's `LabelRanking`, with the content-free prompt calibration needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional

from pydantic import create_model

from data_prep.dialogues import Dialogue, Turn
from distill.backends.base import LabelRanking
from distill.backends.label_rank import CONTENT_FREE, label_slot
from distill.roles.roles import PromptStyle, RoleInput, RoleSpec

LabelDecodingMode = Literal["rank", "rank-calibrated"]


def split_key(key: str) -> tuple[str, Optional[str]]:
    """`role` or `role.field` -> (role, field or None)."""
    role, _, field = key.partition(".")
    return role, field or None


def check_option(values: dict[str, str], roles: Mapping[str, RoleSpec]) -> dict[str, str]:
    """The config's check: each key a stage of `roles` (the pipeline's) whose answer has that label field
    (ValueError)."""
    named = [split_key(key)[0] for key in values]
    if twice := sorted({r for r in named if named.count(r) > 1}):
        raise ValueError(f"{', '.join(twice)}: one label field per role is ranked")
    for key in values:
        role, field = split_key(key)
        if role not in roles or not roles[role].stage:
            raise ValueError(
                f"'{role}' is not a pipeline stage (stages: {', '.join(r for r in roles if roles[r].stage)})"
            )
        try:
            label_slot(roles[role].schema.model_json_schema(), field)
        except ValueError as exc:
            raise ValueError(f"{key}: {str(exc).removeprefix('label ranking: ')}") from None
    return values


class LabelDecoding:
    """The roles of one pipeline that rank a label, and each one's `LabelRanking` (content-free prompt cached)."""

    def __init__(
        self,
        option: dict[str, str],
        backend: Any,
        style: PromptStyle,
        stages: Sequence[RoleSpec],
        direct: bool,
    ):
        names = [spec.name for spec in stages]
        self.modes = {split_key(key): mode for key, mode in option.items() if split_key(key)[0] in names}
        if self.modes and not getattr(backend, "ranks_labels", False):
            # an API returns text, not the log-likelihood of a given continuation after the prompt
            roles = ", ".join(sorted(role for role, _ in self.modes))
            raise ValueError(
                f"label_decoding ({roles}): the {backend.name} backend cannot rank labels; the local one can"
            )
        self.style, self.stages, self.direct = style, tuple(names), direct
        specs = {spec.name: spec for spec in stages}
        for role, field in self.modes:  # the student's answer may lack the field the full schema has
            label_slot(specs[role].schema_for(style, self.stages).model_json_schema(), field)
        self._rankings: dict[str, LabelRanking] = {}

    def ranking(self, spec: RoleSpec) -> Optional[LabelRanking]:
        if spec.name not in self._rankings:
            found = [(field, mode) for (role, field), mode in self.modes.items() if role == spec.name]
            if not found:
                return None
            field, mode = found[0]
            schema = spec.schema_for(self.style, self.stages).model_json_schema()
            calibrated = mode == "rank-calibrated"
            self._rankings[spec.name] = LabelRanking(
                field=label_slot(schema, field).field,
                calibrated=calibrated,
                content_free=self.content_free(spec) if calibrated else None,
            )
        return self._rankings[spec.name]

    def content_free(self, spec: RoleSpec) -> list[dict[str, str]]:
        """The role's prompt with its content replaced by "N/A" (Zhao et al. 2021): one seeker turn "N/A" and
        every upstream field it reads "N/A"; no exemplars, gold guidance or correction. The template stays."""
        dialogue = Dialogue(
            id=CONTENT_FREE,
            conv_id=CONTENT_FREE,
            turns=[Turn(speaker="seeker", text=CONTENT_FREE)],
            situation=CONTENT_FREE,
            emotion=CONTENT_FREE,
        )
        upstream = {}
        for name in () if self.direct else spec.inputs:
            if name in self.stages:
                blank = {f: (str, CONTENT_FREE) for f in spec.input_spec(name).schema.model_fields}
                upstream[name] = create_model(f"ContentFree_{name}", **blank)()
        exemplars = [] if spec.uses_exemplars else None
        return spec.render(RoleInput(dialogue=dialogue, upstream=upstream, exemplars=exemplars), self.style)

"""The settings of `eval students`' chain students that learn from more than their own rows (issue 79): a multitask
student's auxiliary rows (`auxiliary:`) and a student-forced student's cross-fitted folds (`forced:`). Apart from
`eval.students.config`, which holds them on a `StudentSpec`, so that module stays one sitting's read."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AuxiliarySpec(_Strict):
    """A multitask student's auxiliary rows (distilling step-by-step): the upstream links of another import of the
    same train dialogues, each a task of its own beside the reply."""

    mapping: str = Field(description="the import mapping whose pipeline's links give them (e.g. esdcot-instruction)")
    share: float = Field(1.0, description="the share of train dialogues given auxiliary rows (0 < share <= 1)")

    @field_validator("share", mode="before")
    @classmethod
    def _a_share(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ValueError(f"{value!r} is not a share of the train dialogues: a number above 0 and at most 1 "
                             "(1 = every dialogue)")  # fmt: skip
        return value

    @cached_property
    def pipeline(self) -> str:
        from distill.imports.mapping import load_mapping

        return load_mapping(self.mapping).pipeline  # one line naming the file and the field

    @cached_property
    def links(self) -> list[str]:
        """The upstream links: its pipeline's stages less those its mapping skips, less the reply role."""
        from distill.imports.mapping import load_mapping
        from distill.pipeline.config import PipelineConfig
        from distill.quality.checks import is_reply_role

        config = PipelineConfig(pipeline=self.pipeline, skip=list(load_mapping(self.mapping).skip))
        return [r for r in config.stages() if not is_reply_role(r, config.roles)]


class ForcedSpec(_Strict):
    """A student-forced student's reply rows (scheduled sampling, DAgger): their upstream is the student's own answers
    on the train dialogues, cross-fitted: the train conversations fall into `folds` seeded folds, and each fold is
    answered by upstream adapters trained on the other folds alone."""

    folds: StrictInt = Field(2, description="the seeded folds of the train conversations (at least 2)")
    share: float = Field(
        0.0, description="the share of reply rows that keep the teacher's upstream (0 <= share <= 1; 0 = none)"
    )

    @field_validator("folds")
    @classmethod
    def _at_least_two(cls, value: int) -> int:
        if value < 2:
            raise ValueError(f"{value} folds: cross-fitting takes at least 2 (each fold answered by adapters "
                             "trained on the others)")  # fmt: skip
        return value

    @field_validator("share", mode="before")
    @classmethod
    def _a_share(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(f"{value!r} is not a share of the reply rows: a number from 0 to 1 (0 = every row "
                             "reads the student's own upstream, 1 = every row the teacher's)")  # fmt: skip
        return value

"""The SFT rows a distillation claim is measured against: direct rows and rationale-task twins.

- **Direct rows** (`inputs="direct"`): standard fine-tuning on the dataset's own labels, the baseline a
  distilled student must beat. The dialogue in, the gold answer out, with no teacher output anywhere:
  no rationale, no upstream role's answer. Only `asi` (the gold Ekman emotion) and `ers` (the human
  reply) have gold answers, so only they have direct rows. Today's pipeline `asi` rows already have this
  form (its student answers the label alone); they differ only in being filtered by the teacher's trace.
- **Auxiliary link rows** (`with_link_rows`, the `multitask` student of `eval students`): the reply rows of a
  dialogue-to-reply student, plus, for a seeded share of their dialogues, one row per upstream link of a chain (the
  reply row's input under the link's tag, e.g. `[em]`, the link's answer as target). It answers the reply task
  alone at test, so the chain shapes the weights and costs nothing there.
- **Rationale-task twins** (Distilling step-by-step, Hsieh et al. 2023): a label row gains a twin with
  the same input and a task prefix, whose target is a rationale. At inference the student is asked the
  label task alone, so the rationale shapes the weights, never the answer's prompt. The rationale is the
  teacher's (`reasoning`) or a human-written stand-in: ED's situation text, where the seeker says what
  happened. The situation is only ever a twin's *target*, never any row's input.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Literal, Optional

from data_prep.taxonomy import to_ekman
from distill.pipeline.trace import Trace
from distill.roles.roles import ROLES, RoleInput, render_student

if TYPE_CHECKING:
    from datasets import DatasetDict

JOINT = "joint"  # one adapter for every role: each row's system tag already names its role
DIRECT_ROLES = ("asi", "ers")  # the roles with a gold answer in the data itself
RATIONALE_ROLES = ("asi", "srp")  # the classification roles whose teacher answer carries a rationale
RationaleSource = Literal["teacher", "situation"]


def rationale_tag(role: str) -> str:
    """The system tag that names the rationale task (the label task's tag is `[role]`)."""
    return f"[{role} rationale]"


def direct_row(role: str, trace: Trace) -> tuple[Optional[dict], Optional[str]]:
    """The dialogue alone in, the dataset's gold answer out; (None, reason) when the dialogue has none."""
    if role not in DIRECT_ROLES:
        raise ValueError(f"direct rows exist for {', '.join(DIRECT_ROLES)} only (the roles with gold answers)")
    spec, dialogue = ROLES[role], trace.dialogue
    if role == "asi":
        try:
            target = spec.student_schema.model_validate({"emotion": to_ekman(dialogue.emotion)})
        except ValueError:
            return None, "gold emotion not a known label"
    else:
        if not dialogue.gold_response:
            return None, "no gold response"
        try:
            target = spec.schema.model_validate({"response": dialogue.gold_response})
        except ValueError:
            return None, "gold response invalid for schema"
    prompt = render_student(spec, RoleInput(dialogue=dialogue))
    completion = [{"role": "assistant", "content": target.model_dump_json()}]
    return {
        "prompt": prompt,
        "completion": completion,
        "messages": prompt + completion,
        "dialogue_id": dialogue.id,
        "conv_id": dialogue.conv_id,
        "key": trace.key,
        "task": "label",
    }, None


def rationale_text(role: str, trace: Trace, source: RationaleSource) -> Optional[str]:
    """The rationale a twin row teaches, or None when this trace has none to give."""
    if source == "situation":
        text = trace.dialogue.situation
    else:
        text = (trace.outputs.get(role) or {}).get("reasoning")
    text = " ".join((text or "").split())
    return text or None


def task_twin(row: dict, tag: str, target: str, task: str) -> dict:
    """The row's input (its dialogue) under another task's system tag, `target` its completion."""
    prompt = [{"role": "system", "content": tag}, *row["prompt"][1:]]
    completion = [{"role": "assistant", "content": target}]
    return {**row, "prompt": prompt, "completion": completion, "messages": prompt + completion, "task": task}


def rationale_twin(row: dict, text: str, role: str) -> dict:
    """The label row's input under the rationale task's tag, with the rationale as its target."""
    return task_twin(row, rationale_tag(role), text, "rationale")


def with_rationale_twins(
    rows: list[dict], role: str, traces_by_key: dict[str, Trace], source: RationaleSource, share: float, seed: int
) -> tuple[list[dict], int]:
    """`rows` plus a twin for a seeded `share` of them (label rows unchanged), shuffled together; and the
    number of chosen rows that had no rationale to give."""
    if role not in RATIONALE_ROLES:
        return rows, 0
    rng = random.Random(seed)
    chosen = [r for r in rows if rng.random() < share]
    twins, missing = [], 0
    for row in chosen:
        text = rationale_text(role, traces_by_key[row["key"]], source)
        if text is None:
            missing += 1
            continue
        twins.append(rationale_twin(row, text, role))
    out = rows + twins
    rng.shuffle(out)
    return out, missing


def joint_dataset(built: dict[str, DatasetDict], seed: int) -> DatasetDict:
    """Every role's rows in one dataset, shuffled, for one adapter that serves all roles."""
    from datasets import DatasetDict, concatenate_datasets

    splits = next(iter(built.values())).keys()
    return DatasetDict({s: concatenate_datasets([dd[s] for dd in built.values()]).shuffle(seed=seed) for s in splits})


def link_task(link: str) -> str:
    """The `task` column of an auxiliary row of that link (a reply row's is "label")."""
    return f"link {link}"


def with_link_rows(
    rows: list[dict], links: dict[str, list[dict]], share: float, seed: int
) -> tuple[list[dict], dict[str, Any]]:
    """The reply `rows` plus auxiliary rows (step-by-step): for a seeded `share` of their dialogues (round(share *
    dialogues), at least one), the reply row's input under each link's tag (`[em]`), that link's row's answer (the
    same dialogue's, from `links`: link -> its rows) as target; shuffled together, reply rows unchanged. Returns them
    and what was built (the dataset card's section)."""
    dialogues = sorted({r["dialogue_id"] for r in rows})
    rng = random.Random(seed)
    chosen = set(rng.sample(dialogues, max(1, round(share * len(dialogues))))) if dialogues else set()
    aux, counts, missing = [], {}, {}
    for link, link_rows in links.items():
        answers = {r["dialogue_id"]: r["completion"][0]["content"] for r in link_rows}
        made = [task_twin(row, f"[{link}]", answers[row["dialogue_id"]], link_task(link))
                for row in rows if row["dialogue_id"] in chosen and row["dialogue_id"] in answers]  # fmt: skip
        counts[link], missing[link] = len(made), len(chosen) - len(made)
        aux += made
    out = rows + aux
    rng.shuffle(out)
    built = {"share": share, "seed": seed, "dialogues": len(dialogues), "chosen": len(chosen),
             "rows": counts, "without_answer": missing}  # fmt: skip
    return out, built

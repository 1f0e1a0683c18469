"""The model card (`README.md`) of one role adapter: what it does, what made it, how to use it.

Rendered from the adapter's metadata and the build record of the dataset it was trained on, so the
card says nothing that the folder does not record. Eval figures appear when a compare report is given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from distill.adapters.adapters import (
    CARD_FILE,
    base_hub_id,
    embedded_note,
    read_metadata,
    role_repo,
    vllm_max_rank,
    write_metadata,
)
from distill.datasets.dataset_card import label_section, read_build_record
from distill.datasets.sft_tasks import JOINT
from distill.roles.declared import load_pipeline, pipeline_roles, stored_roles
from distill.roles.roles import DEFAULT_STAGES, RoleSpec

# Training options worth quoting; the full config is in the metadata file.
_TRAIN_KEYS = (
    "learning_rate", "num_train_epochs", "max_steps", "max_tokens_budget", "per_device_train_batch_size",
    "gradient_accumulation_steps", "max_length", "bf16", "seed",
)  # fmt: skip


def _front_matter(meta: dict) -> str:
    base = base_hub_id(meta)
    lines = ["---", "library_name: peft", "pipeline_tag: text-generation"]
    if base:
        lines.append(f"base_model: {base}")
    lines += ["tags: [trace-distill, lora, sft, trl, empathetic-dialogue]", "---"]
    return "\n".join(lines)


def _dataset_section(meta: dict) -> str:
    record = read_build_record(meta.get("dataset_dir", ""))
    if record is None:
        return f"Dataset: `{meta.get('dataset_dir')}` (no build record; built outside trace-distill)."
    teacher, counts = record["teacher"], record["counts"]
    backend = teacher["backend"]
    drops = ", ".join(f"{why}: {n}" for why, n in counts["dropped"].items()) or "none"
    return "\n".join(
        [
            f"- pipeline: {_pipeline_named(teacher)}",
            f"- teacher: `{backend.get('model')}` via the `{backend.get('backend_name') or backend.get('backend')}` "
            f"backend, teacher prompt version(s) {', '.join(map(str, teacher['prompt_versions']))}",
            f"- gold guidance shown to the teacher: emotion {'yes' if teacher['gold_emotion'] else 'no'}, "
            f"response {'yes' if teacher['gold_response'] else 'no'}",
            f"- filters: `{json.dumps(record['options'], sort_keys=True)}`",
            f"- traces read {counts['read']}, kept {counts['kept']} (dropped: {drops}); rows per split: "
            + ", ".join(f"{s} {n}" for s, n in record["rows"].items()),
        ]
    )


def _pipeline_named(teacher: dict) -> str:
    """The pipeline the dataset's traces were made with, by name: a variant's traces carry the variant's."""
    declared = (teacher.get("config") or {}).get("pipeline")
    return f"`{declared['name']}` (declared)" if isinstance(declared, dict) else "TRACE's (built in)"


def _training_section(meta: dict) -> str:
    cfg = meta.get("train_config", {})
    quoted = {k: cfg[k] for k in _TRAIN_KEYS if k in cfg}
    lora = meta.get("lora", {})
    return "\n".join(
        [
            f"- LoRA r={lora.get('r')}, alpha={lora.get('alpha')}, dropout={lora.get('dropout')}, "
            f"target modules {lora.get('target_modules')}; 4-bit base (QLoRA): {meta.get('quantized_4bit')}",
            f"- options: `{json.dumps(quoted, sort_keys=True)}`",
            f"- tokens seen: {meta.get('tokens_seen'):,}; steps: {meta.get('global_step')}; "
            f"processes: {meta.get('world_size')}; seconds: {meta.get('train_seconds')}",
            f"- loss: train {_rounded(meta.get('train_loss'))}, validation {_rounded(meta.get('eval_loss'))}",
            f"- student prompt version: `{meta.get('prompt_version')}` (the prompts in `distill/roles/roles.py`)",
        ]
    )


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _eval_section(figures: Optional[dict[str, Any]]) -> str:
    if not figures:
        return "No eval figures yet: `trace-distill eval compare` scores the student pipeline these adapters form."
    rows = "\n".join(f"| {name} | {value} |" for name, value in figures.items())
    head = "The student pipeline (all role adapters together), from `eval compare`:"
    return f"{head}\n\n| metric | value |\n|---|---|\n{rows}"


# The card's runnable snippet, in two parts: loading, and answering `messages`. Training runs the
# answering part on the adapter it just trained to record the card's example answer, and the tests
# run both parts as the card prints them, so the card shows what the snippet really answers.
_LOAD = """from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{repo}")
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{base}"), "{repo}")
"""
_ANSWER = """inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
).to(model.device)
output = model.generate(**inputs, max_new_tokens={max_new_tokens}, do_sample=False)
answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
"""
_PRINT = "print(answer)\n"


def snippet(base: str, repo: str, max_new_tokens: int) -> tuple[str, str]:
    """The card's code, (load, answer), with the base and adapter named; the card prints `answer` after."""
    return _LOAD.format(base=base, repo=repo), _ANSWER.format(max_new_tokens=max_new_tokens)


def run_answer(model: Any, tokenizer: Any, messages: list[dict[str, str]], max_new_tokens: int) -> str:
    """The snippet's answering part, run on a loaded model (greedy, as the card prints it)."""
    import torch

    scope = {"model": model, "tokenizer": tokenizer, "messages": messages}
    was_training = model.training
    model.eval()
    with torch.no_grad():
        exec(snippet("", "", max_new_tokens)[1], scope)
    model.train(was_training)
    return scope["answer"]


def card_example(model: Any, tokenizer: Any, data: Any, budget: int) -> dict[str, Any]:
    """The first prompt of the role's validation split (train when that is empty) and the model's answer, at most
    `budget` (the role's max_new_tokens) tokens."""
    split = "validation" if "validation" in data and len(data["validation"]) else "train"
    messages = [{"role": m["role"], "content": m["content"]} for m in data[split][0]["prompt"]]
    answer = run_answer(model, tokenizer, messages, budget)
    return {"split": split, "messages": messages, "max_new_tokens": budget, "answer": answer}


def _example_section(meta: dict, spec: RoleSpec, repo: str) -> str:
    base = base_hub_id(meta) or meta.get("base_model")
    example = meta.get("example")
    if not example:
        return (
            "`messages` must be the student prompt this adapter learned (`trace-distill` renders it; see\n"
            f"`distill/roles/roles.py`, prompt version `{meta.get('prompt_version')}`). With them, plain\n"
            "transformers and PEFT run it:\n\n"
            f"```python\n{''.join(snippet(base, repo, spec.max_new_tokens))}{_PRINT}```"
        )
    load, answer = snippet(base, repo, example["max_new_tokens"])
    ordered = [{"role": m["role"], "content": m["content"]} for m in example["messages"]]  # stored key-sorted
    messages = json.dumps(ordered, indent=2, ensure_ascii=False)
    return f"""The student prompt this adapter learned (prompt version `{meta.get("prompt_version")}`), rendered for one
dialogue of its {example["split"]} split, as chat messages:

```python
messages = {messages}
```

Run with plain transformers and PEFT (trace-distill not needed):

```python
{load}{answer}{_PRINT}```

The adapter's answer (this snippet, greedy, at the end of training):

```json
{example["answer"]}
```"""


def _serving_section(meta: dict, role: str, repo: str) -> str:
    base = base_hub_id(meta) or meta.get("base_model")
    rank = vllm_max_rank([int(meta.get("lora", {}).get("r", 16))])
    return f"""Served with vLLM, next to the other roles:

```bash
vllm serve {base} --enable-lora --max-lora-rank {rank} --lora-modules {role}={repo}
```"""


def render_joint_card(meta: dict, figures: Optional[dict[str, Any]] = None) -> str:
    """The card of one adapter trained on every role's rows (the system tag `[role]` picks the role)."""
    return f"""{_front_matter(meta)}
# trace-distill adapter: `{JOINT}` (every role in one adapter)

One LoRA adapter for all of trace-distill's distilled agents ({", ".join(f"`{r}`" for r in DEFAULT_STAGES)}),
the baseline against one adapter per role. Each prompt's system message `[<role>]` names the agent;
the prompts and answers are those of the per-role adapters (see their cards).
- base model: `{base_hub_id(meta) or meta.get("base_model")}`

## Training

{_training_section(meta)}

## Evaluation

{_eval_section(figures)}
"""


def _role_spec(meta: dict) -> RoleSpec:
    """The adapter's role: a built-in one, or its declared pipeline's, which the dataset's build record carries
    (else the train config names its file)."""
    record = read_build_record(meta.get("dataset_dir", "")) or {}
    roles = stored_roles(record.get("teacher", {}).get("config", {}))
    pipeline = meta.get("train_config", {}).get("pipeline")
    if meta["role"] not in roles and pipeline:
        roles = pipeline_roles(load_pipeline(pipeline))
    return roles[meta["role"]]


def render_adapter_card(meta: dict, repo: str, figures: Optional[dict[str, Any]] = None) -> str:
    role = meta["role"]
    if role == JOINT:
        return render_joint_card(meta, figures)
    spec = _role_spec(meta)
    answer = spec.schema_for("student")
    return f"""{_front_matter(meta)}
# trace-distill adapter: `{role}` ({spec.title})

A LoRA adapter for the `{role}` agent of trace-distill's distilled empathetic-response pipeline
(TRACE's emotion, cause, strategy and response agents, each its own adapter on one base).

- reads: the dialogue{"".join(f", `{i}`" for i in spec.inputs)}
- answers: JSON of `{answer.__name__}` with fields {", ".join(f"`{f}`" for f in answer.model_fields)}
- base model: `{base_hub_id(meta) or meta.get("base_model")}`
{embedded_note(meta)}
## Labels

{label_section(answer)}

## Dataset

{_dataset_section(meta)}

## Training

{_training_section(meta)}

## Evaluation

{_eval_section(figures)}

## Use

{_example_section(meta, spec, repo)}

{_serving_section(meta, role, repo)}

Data license: adapters trained on EmpatheticDialogues inherit its CC BY-NC 4.0 terms (non-commercial use).
"""


def write_adapter_card(folder: Path, hub_model_id: Optional[str] = None, figures: Optional[dict] = None) -> Path:
    """(Re)write `<folder>/README.md`, the card's one writer. What it says comes from the metadata: a hub id
    or eval figures given here are recorded there first, so a later rewrite keeps them."""
    meta = read_metadata(folder)
    if hub_model_id or figures:
        meta |= {k: v for k, v in (("hub_model_id", hub_model_id), ("card_figures", figures)) if v}
        write_metadata(folder, meta)
    hub = meta.get("hub_model_id")
    repo = role_repo(hub, meta["role"]) if hub else str(folder)
    path = folder / CARD_FILE
    path.write_text(render_adapter_card(meta, repo, meta.get("card_figures")), encoding="utf-8")
    return path

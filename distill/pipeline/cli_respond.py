"""`python -m distill respond`: run the pipeline on one dialogue and print every stage and the reply.

    python -m distill respond "I failed my driving test again."                 # base model, teacher prompts
    python -m distill respond --adapters runs/adapters "I failed my driving test again."   # student
    python -m distill respond --dialogue-file chat.txt --reflection

Dialogue text: one turn per line; a line may start with 'seeker:' or 'responder:', otherwise turns
alternate starting with the seeker. Without --adapters the base model is prompted with the full
teacher prompts (it has no adapter to carry the instructions); with --adapters each stage uses its
role adapter and the compact student prompt.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from data_prep.dialogues import Dialogue, Turn

_SPEAKERS = ("seeker", "responder")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="?", default=None, help="the dialogue (one turn per line)")
    parser.add_argument("--dialogue-file", default=None, help="read the dialogue from this file instead")
    parser.add_argument("--situation", default="", help="optional situation prompt shown to the teacher")
    parser.add_argument("--model", default="smollm2-135m", help="model alias or path for the local backend")
    parser.add_argument("--adapters", default=None, help="<dir>/<role>/ LoRA adapters: student prompts + adapters")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 where it runs natively), float32 or bfloat16")
    parser.add_argument(
        "--reflection", action="store_true", help="MERG audit-and-rerun loop (needs a gra adapter with --adapters)"
    )
    parser.add_argument("--json", action="store_true", help="print the whole trace as JSON instead")


def parse_dialogue(text: str, situation: str = "", source: str = "<text>") -> Dialogue:
    """A `Dialogue` from plain text; an unlabelled line takes the speaker after the previous one."""
    from data_prep.ed_formats import control_character, visible

    turns: list[Turn] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if code := control_character(line):
            raise ValueError(f"{source} line {number}: control character {code} in the text")
        if not visible(line):  # a line of zero-width characters is as blank as an empty one
            continue
        head, _, rest = line.partition(":")
        if head.strip().lower() in _SPEAKERS and rest.strip():
            speaker, line = head.strip().lower(), rest.strip()
        else:
            speaker = "seeker" if not turns or turns[-1].speaker == "responder" else "responder"
        turns.append(Turn(speaker=speaker, text=line))
    if not turns:
        raise ValueError(f"{source}: the dialogue is empty (give at least one seeker turn)")
    if turns[-1].speaker != "seeker":
        raise ValueError(f"{source} line {len(text.splitlines())}: the dialogue must end on a seeker turn")
    # There is no gold emotion for a live dialogue: the field stays empty (gold guidance is off,
    # so no prompt reads it).
    return Dialogue(
        id="respond#1",
        conv_id="respond",
        turns=turns,
        situation=situation or turns[0].text,
        emotion="",
        gold_response=None,
    )


USER_ERRORS = (OSError, ValueError)  # one line, exit 2 (data_prep.commands)


def run(args: argparse.Namespace) -> int:
    dialogue = _read_dialogue(args)
    from distill.backends.local import LocalBackend
    from distill.pipeline.config import PipelineConfig
    from distill.pipeline.pipeline import Pipeline

    student = args.adapters is not None
    backend = LocalBackend(model=args.model, adapters=args.adapters, dtype=args.dtype)
    config = PipelineConfig(
        prompt_style="student" if student else "teacher", use_adapters=student, reflection=args.reflection, rag=False
    )
    trace = Pipeline(config, backend).run([dialogue], progress=False)[0]
    if args.json:
        print(trace.model_dump_json(indent=2))
    else:
        _print_trace(trace)
    return 0 if trace.status == "ok" else 1


def _read_dialogue(args: argparse.Namespace) -> Dialogue:
    if (args.text is None) == (args.dialogue_file is None):
        raise ValueError("give the dialogue either as text or with --dialogue-file (exactly one)")
    if args.dialogue_file:
        try:
            text = Path(args.dialogue_file).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{args.dialogue_file}: not UTF-8 text (save it as UTF-8)") from None
        return parse_dialogue(text, args.situation, args.dialogue_file)
    return parse_dialogue(args.text, args.situation)


def _print_trace(trace) -> None:
    for step in trace.steps:
        label = f"[{step.role}]" + (f" (iteration {step.iteration})" if step.iteration else "")
        body = (
            json.dumps(step.parsed, ensure_ascii=False)
            if step.valid
            else f"INVALID: {step.error}\n  raw: {step.raw[:300]}"
        )
        print(f"{label} {body}")
    if trace.status == "failed":
        print(f"\nno reply: {trace.failure}")
    else:
        print(f"\nreply: {trace.response}")

"""`python -m train export`: turn trained role adapters into something a server can load.

- ``--format merged`` writes one full model per role (LoRA merged into an fp32 or bf16 copy of the
  base, plus the tokenizer) to ``<out>/<role>/``: the fastest way to run one role on its own, and what
  any runtime without LoRA support needs.
- ``--format vllm`` keeps the adapters as they are and writes the ``--lora-modules asi=<path> …``
  argument line and a complete ``vllm serve <base> --enable-lora …`` command to ``<out>/`` and stdout:
  one base in memory serves every role.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from distill.adapters import AdapterError, find_adapters, read_metadata, vllm_max_rank
from train.sft import log


def base_for(adapters: dict[str, Path]) -> tuple[str, str]:
    """(base model name, local path) shared by all adapters; mixing bases is an error."""
    bases = {(m["base_model"], m["base_model_path"]) for m in (read_metadata(p) for p in adapters.values())}
    if len(bases) != 1:
        raise AdapterError(f"adapters were trained on different bases: {sorted(b[0] for b in bases)}")
    return bases.pop()


def export_merged(adapters: dict[str, Path], out: Path, dtype: str = "float32") -> dict[str, Path]:
    """One merged full model per role; the base is reloaded per role because merging rewrites it."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from data_prep.models import resolve_model

    name, path = base_for(adapters)
    base_path = path if Path(path).exists() else resolve_model(name)
    written = {}
    for role, adapter in adapters.items():
        base = AutoModelForCausalLM.from_pretrained(base_path, dtype=getattr(torch, dtype))
        merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
        target = out / role
        merged.save_pretrained(str(target), safe_serialization=True)
        AutoTokenizer.from_pretrained(base_path).save_pretrained(str(target))
        log(f"merged {role} -> {target}")
        written[role] = target
    return written


def vllm_command(adapters: dict[str, Path]) -> tuple[str, str]:
    """(the --lora-modules argument line, a ready `vllm serve` command)."""
    name, path = base_for(adapters)
    served_base = path if Path(path).exists() else name
    ranks = [read_metadata(p)["lora"]["r"] for p in adapters.values()]
    max_rank = vllm_max_rank(ranks)
    modules = " ".join(f"{role}={shlex.quote(str(p))}" for role, p in adapters.items())
    line = f"--lora-modules {modules}"
    command = (
        f"vllm serve {shlex.quote(served_base)} --enable-lora --max-lora-rank {max_rank} "
        f"--max-loras {len(adapters)} {line}"
    )
    return line, command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adapters", required=True, help="Directory with one <role>/ adapter per role.")
    parser.add_argument("--format", choices=("merged", "vllm"), required=True, help="merged models or a vLLM command.")
    parser.add_argument("--out", required=True, help="Where to write the merged models or the vLLM files.")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="dtype of merged models.")


def run(args: argparse.Namespace) -> int:
    adapters = find_adapters(args.adapters)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.format == "merged":
        export_merged(adapters, out, args.dtype)
        return 0
    line, command = vllm_command(adapters)
    (out / "lora_modules.txt").write_text(line + "\n")
    (out / "serve_vllm.sh").write_text(
        "#!/bin/sh\n# Serve every role adapter from one base (written by `python -m train export`).\n"
        f'exec {command} "$@"\n'
    )
    (out / "serve_vllm.sh").chmod(0o755)
    print(line)
    print(command)
    return 0


def main(argv: list[str], prog: str = "python -m train export") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))

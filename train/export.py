"""`python -m train export`: turn trained role adapters into something a server can load.

- ``--format merged`` writes one full model per role (LoRA merged into an fp32 or bf16 copy of the
  base, plus the tokenizer) to ``<out>/<role>/``: the fastest way to run one role on its own, and what
  any runtime without LoRA support needs.
- ``--format vllm`` copies the adapters to ``<out>/<role>/`` and writes ``serve_vllm.sh``, a complete
  ``vllm serve <base hub id> --served-model-name … --enable-lora --lora-modules asi=<out>/asi …``
  command (also on stdout) with paths relative to the script, so the folder can move: one base in
  memory serves every role, and a client picks the role by sending its name as ``model``.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
from pathlib import Path

from distill.adapters.adapters import AdapterError, base_hub_id, find_adapters, read_metadata, vllm_max_rank
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


def vllm_base(adapters: dict[str, Path]) -> tuple[str, bool]:
    """(what `vllm serve` loads, whether it is a hub id): the base's hub id wherever one is known."""
    name, path = base_for(adapters)
    hub = base_hub_id(read_metadata(next(iter(adapters.values()))))
    return (hub, True) if hub else (path if Path(path).exists() else name, False)


def vllm_command(adapters: dict[str, Path], served_name: str | None = None, root: str | None = None) -> tuple[str, str]:
    """(the --lora-modules argument line, a ready `vllm serve` command); adapter paths under `root` if given."""
    base, _ = vllm_base(adapters)
    ranks = [read_metadata(p)["lora"]["r"] for p in adapters.values()]
    modules = " ".join(f"{role}={f'{root}/{role}' if root else shlex.quote(str(p))}" for role, p in adapters.items())
    line = f"--lora-modules {modules}"
    command = (
        f"vllm serve {shlex.quote(base)} --served-model-name {shlex.quote(served_name or base)} --enable-lora "
        f"--max-lora-rank {vllm_max_rank(ranks)} --max-loras {len(adapters)} {line}"
    )
    return line, command


def write_vllm_export(adapters: dict[str, Path], out: Path, served_name: str | None = None) -> Path:
    """Copy the adapters next to a `serve_vllm.sh` that serves them all from one base; returns the script."""
    for role, folder in adapters.items():
        shutil.copytree(folder, out / role, ignore=shutil.ignore_patterns("checkpoints"), dirs_exist_ok=True)
    base, from_hub = vllm_base(adapters)
    copied = {role: (out / role).resolve() for role in adapters}
    line, command = vllm_command(copied, served_name, root='"$here"')
    note = "" if from_hub else f"# No hub id is known for the base, so vLLM loads it from {base}.\n"
    script = out / "serve_vllm.sh"
    script.write_text(
        "#!/bin/sh\n# Serve every role adapter from one base (written by `trace-distill train export`).\n"
        "# The adapters are copied next to this script: move or copy the folder as a whole.\n"
        f'{note}here="$(cd "$(dirname "$0")" && pwd)"\nexec {command} "$@"\n'
    )
    script.chmod(0o755)
    (out / "lora_modules.txt").write_text(vllm_command(copied, served_name)[0] + "\n")
    return script


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adapters", required=True, help="Directory with one <role>/ adapter per role.")
    parser.add_argument("--format", choices=("merged", "vllm"), required=True, help="merged models or a vLLM command.")
    parser.add_argument("--out", required=True, help="Where to write the merged models or the vLLM files.")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="dtype of merged models.")
    parser.add_argument(
        "--served-model-name", default=None, help="vllm: the name clients send for the base (default: its hub id)"
    )


def run(args: argparse.Namespace) -> int:
    adapters = find_adapters(args.adapters)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.format == "merged":
        export_merged(adapters, out, args.dtype)
        return 0
    script = write_vllm_export(adapters, out, args.served_model_name)
    print(script.read_text().splitlines()[-1])
    return 0


def main(argv: list[str], prog: str = "python -m train export") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))

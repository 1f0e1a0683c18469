"""The README's Python example ("In Python") runs as written: on the quickstart's folders (its dialogues written by
`data_prep dialogues` from the shipped sample, one LoRA adapter per role saved by plain PEFT on the embedded model),
with the names `distill` exports."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## In Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_example_is_short_and_imports_what_distill_exports():
    import distill

    code = readme_example()
    assert len(code.strip().splitlines()) <= 10
    names = re.search(r"^from distill import (.+)$", code, re.M).group(1).split(", ")
    assert all(name in distill.__all__ and getattr(distill, name) for name in names)
    with pytest.raises(AttributeError):
        distill.not_a_public_name  # noqa: B018


@pytest.mark.slow
def test_the_example_runs_on_the_quickstarts_folders(tmp_path, smollm_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from data_prep.__main__ import main as data_prep_main
    from distill.roles.roles import CORE_ROLES

    runs = tmp_path / "runs" / "quickstart"
    sample = REPO / "data_prep" / "sample" / "ed_sample.csv"
    argv = ["dialogues", "--source", str(sample), "--out", str(runs / "dialogues"), "--split-ratios", "0.6,0.1,0.3"]
    assert data_prep_main(argv) == 0
    for role in CORE_ROLES:  # untrained (identity) adapters: the example's code path, not the quickstart's training
        lora = LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM")
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(smollm_path), lora)
        model.save_pretrained(runs / "adapters" / role)
    out, cwd = io.StringIO(), Path.cwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(readme_example(), "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and all(re.match(r"^\w+ \{'asi': ", line) for line in lines), lines

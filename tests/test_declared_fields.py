"""A declared pipeline (distill.roles.declared) refuses, in one line naming the file and the field, what would
otherwise break later or run silently wrong: answer-field and role names pydantic cannot take (a traceback from
`create_model` before), YAML's `true` as an integer (taken as 1 before), and prompted text that is only whitespace."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from data_prep.dialogues import Dialogue, Turn
from distill.__main__ import main as distill
from distill.roles.declared import load_pipeline
from distill.roles.roles import build_role_input

REPO = Path(__file__).resolve().parents[1]
ESCOT = REPO / "configs" / "pipelines" / "escot.yaml"
FULL_CHAIN = REPO / "configs" / "import" / "esdcot-full-chain.yaml"


def _declared(tmp_path: Path, change) -> Path:
    """escot.yaml with `change` applied to its parsed form, written to a temporary file."""
    pipeline = yaml.safe_load(ESCOT.read_text(encoding="utf-8"))
    change(pipeline)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(pipeline, sort_keys=False), encoding="utf-8")
    return path


def _rename_field(old: str, new: str):
    def change(pipeline: dict) -> None:
        role = next(r for r in pipeline["roles"] if old in r["answer"])
        role["answer"][new] = role["answer"].pop(old)
        if role.get("student_answer"):
            role["student_answer"] = [new if f == old else f for f in role["student_answer"]]

    return change


def _set(role: int, **values):
    return lambda pipeline: pipeline["roles"][role].update(values)


# (the change to escot.yaml, the field the error names, words of its message)
CASES = {
    "private-field": (_rename_field("emotion", "_secret"), "roles.0.answer", "answer field '_secret' is private"),
    "model-config-field": (_rename_field("emotion", "model_config"), "roles.0.answer", "'model_config' is reserved"),
    "model-prefix-field": (_rename_field("stimulus", "model_x"), "roles.1.answer", "'model_x' is reserved"),
    "basemodel-method-field": (_rename_field("reason", "schema"), "roles.3.answer", "'schema' is reserved"),
    "not-identifier-field": (_rename_field("emotion", "the emotion"), "roles.0.answer", "not a Python identifier"),
    "not-identifier-role": (_set(0, name="emotion-recogniser"), "roles.0.name", "not a Python identifier"),
    "reserved-role": (_set(0, name="model_config"), "roles.0.name", "role name 'model_config' is reserved"),
    "private-role": (_set(0, name="_em"), "roles.0.name", "role name '_em' is private"),
    "bool-context-turns": (_set(0, context_turns=True), "roles.0.context_turns", "valid integer"),
    "bool-max-new-tokens": (_set(0, max_new_tokens=True), "roles.0.max_new_tokens", "valid integer"),
    "bool-temperature": (_set(0, temperature=True), "roles.0.temperature", "valid number"),
    "bool-text-length": (
        lambda p: p["roles"][0]["answer"]["emotion"].update(text=True),
        "roles.0.answer.emotion.text",
        "valid integer",
    ),
    "blank-task": (_set(0, task="  \n "), "roles.0.task", "only whitespace"),
    "blank-title": (_set(0, title=" "), "roles.0.title", "only whitespace"),
    "blank-brief": (_set(0, brief="\t"), "roles.0.brief", "only whitespace"),
    "blank-description": (
        lambda p: p["roles"][0]["answer"]["emotion"].update(description="   "),
        "roles.0.answer.emotion.description",
        "only whitespace",
    ),
    "blank-label": (lambda p: p["labels"]["strategy"].append(" "), "labels.strategy.13", "only whitespace"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_a_bad_declaration_is_one_line_naming_the_file_and_field(case, tmp_path):
    change, field, words = CASES[case]
    path = _declared(tmp_path, change)
    with pytest.raises(ValueError) as err:
        load_pipeline(path)
    message = str(err.value)
    assert message.startswith(f"{path}: field '{field}': ") and words in message, message
    assert "\n" not in message


@pytest.mark.parametrize("case", ["private-field", "model-config-field", "not-identifier-role", "bool-context-turns"])
def test_the_import_command_refuses_it_in_one_line_without_a_traceback(case, tmp_path, capsys):
    change, field, words = CASES[case]
    pipeline = _declared(tmp_path, change)
    mapping = yaml.safe_load(FULL_CHAIN.read_text(encoding="utf-8"))
    mapping["pipeline"] = str(pipeline)
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(mapping), encoding="utf-8")
    out = tmp_path / "run"
    # the data is never read: the declaration is refused first
    argv = ["import", "--data", str(tmp_path / "d.json"), "--mapping", str(tmp_path / "m.yaml"), "--out", str(out)]
    assert distill(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(pipeline) in err and f"field '{field}'" in err and words in err, err
    assert not out.exists()


def test_an_optional_text_left_empty_and_whole_numbers_still_load(tmp_path):
    """The defaults every stored declaration writes out ("" for no brief) and a whole-number temperature stay valid."""
    path = _declared(tmp_path, _set(0, brief="", temperature=0, context_turns=3))
    role = load_pipeline(path).roles[0]
    assert (role.brief, role.temperature, role.context_turns) == ("", 0.0, 3)


def test_a_later_roles_teacher_prompt_briefs_an_input_declared_without_a_brief(tmp_path):
    """`brief` is optional: a later role is told what such an input answered (a KeyError in the briefing before)."""
    specs = {spec.name: spec for spec in load_pipeline(_declared(tmp_path, _set(0, brief=""))).specs()}
    em, es = specs["em"], specs["es"]
    d = Dialogue(
        id="c#1", conv_id="c", turns=[Turn(speaker="seeker", text="My dog ran away.")], situation="x", emotion="sad"
    )
    answer = {name: "sad" for name in em.schema.model_fields}
    prompt = es.render(build_role_input(es, d, {"em": answer}), "teacher")[1]["content"]
    assert f"- the {em.title} answered with its {', '.join(em.schema.model_fields)}." in prompt


# --- variants: `extends` ------------------------------------------------------------------------------------------


def test_a_variant_is_its_base_with_its_role_keys_over_the_base_roles():
    """escot-strategy-first.yaml: escot's roles, sr's student writing the strategy first; the teacher's order kept."""
    from distill.roles.declared import variant_of

    variant = load_pipeline(REPO / "configs" / "pipelines" / "escot-strategy-first.yaml")
    base = load_pipeline(ESCOT)
    assert variant.name == "escot_strategy_first" and [r.name for r in variant.roles] == [r.name for r in base.roles]
    assert variant.role("sr").task == base.role("sr").task and variant.role("em") == base.role("em")
    sr = next(spec for spec in variant.specs() if spec.name == "sr")
    assert list(sr.student_schema.model_fields) == ["strategy", "reason"]
    assert list(sr.schema.model_fields) == ["reason", "strategy"]
    assert variant_of(REPO / "configs" / "pipelines" / "escot-strategy-first.yaml")[1] == {"sr"}
    assert variant_of(ESCOT) is None


@pytest.mark.parametrize(
    ("variant", "words"),
    [
        ({"extends": "escot.yaml", "roles": [{"name": "nobody", "task": "x"}]}, ["'nobody' is not a role of"]),
        ({"extends": "missing.yaml"}, ["missing.yaml", "no such config file"]),
        ({"extends": "escot.yaml", "roles": [{"name": "sr", "student_answer": ["why"]}]}, ["student_answer"]),
    ],
)
def test_a_bad_variant_is_one_line_naming_the_file(variant, words, tmp_path):
    (tmp_path / "escot.yaml").write_text(ESCOT.read_text(encoding="utf-8"), encoding="utf-8")
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({"name": "v", **variant}), encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_pipeline(path)
    assert len(str(err.value).splitlines()) == 1 and all(w in str(err.value) for w in words), err.value


def test_a_student_that_writes_the_strategy_alone_is_read_into_the_full_answer_its_reason_empty():
    """escot-strategy-only.yaml: the full schema's reason is a non-empty text, which the student never writes."""
    from distill.pipeline.reflection import parse_output

    specs = load_pipeline(REPO / "configs" / "pipelines" / "escot-strategy-only.yaml").specs()
    sr = next(spec for spec in specs if spec.name == "sr")
    answer = parse_output(sr, '{"strategy": "Imagery"}', ("em", "sr", "re"), style="student")
    assert isinstance(answer, sr.schema) and answer.model_dump() == {"reason": "", "strategy": "Imagery"}


def test_a_variant_of_a_variant_is_refused(tmp_path):
    (tmp_path / "escot.yaml").write_text(ESCOT.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"extends": "escot.yaml", "name": "a"}), encoding="utf-8")
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"extends": "a.yaml", "name": "b"}), encoding="utf-8")
    with pytest.raises(ValueError, match="itself a variant"):
        load_pipeline(tmp_path / "b.yaml")


def test_import_as_a_pipeline_that_is_not_the_mappings_variant_is_one_line(tmp_path, capsys):
    joint = REPO / "configs" / "pipelines" / "escot-joint.yaml"
    code = distill(["import", "--data", str(tmp_path / "d.json"), "--mapping", str(FULL_CHAIN), "--out",
                    str(tmp_path / "out"), "--pipeline", str(joint)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "not" in err and "a variant of it" in err, err
    assert not (tmp_path / "out").exists()


# --- a variant names itself -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["escot", None])
def test_a_variant_that_takes_its_bases_name_is_refused_in_one_line_before_the_import(name, tmp_path, capsys):
    """Named like escot (or not named, so escot's name carries over), a variant's traces would say `escot` while
    holding the variant's answers: refused when the file is read, with nothing imported."""
    (tmp_path / "escot.yaml").write_text(ESCOT.read_text(encoding="utf-8"), encoding="utf-8")
    variant = {"extends": "escot.yaml", "roles": [{"name": "sr", "student_answer": ["strategy", "reason"]}]}
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({**variant, **({"name": name} if name else {})}), encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_pipeline(path)
    assert str(err.value) == (f"{path}: name: 'escot' is the name of {tmp_path / 'escot.yaml'}, which it extends; "
                              "give the variant a name of its own")  # fmt: skip
    mapping = yaml.safe_load(FULL_CHAIN.read_text(encoding="utf-8"))
    mapping["pipeline"] = str(tmp_path / "escot.yaml")
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(mapping), encoding="utf-8")
    out = tmp_path / "run"
    argv = ["import", "--data", str(tmp_path / "d.json"), "--mapping", str(tmp_path / "m.yaml"), "--out", str(out),
            "--pipeline", str(path)]  # fmt: skip
    assert distill(argv) == 2
    said = capsys.readouterr().err.strip()
    assert len(said.splitlines()) == 1 and str(path) in said and "name: 'escot'" in said, said
    assert not out.exists()


def test_a_variants_traces_datasets_and_adapter_card_name_the_variant(tmp_path, capsys, monkeypatch):
    """escot-strategy-first.yaml imported over the instruction fixture: every trace, the run, each role dataset's
    card and an adapter card made from that dataset say `escot_strategy_first`, never its base's `escot`."""
    import json

    from datasets import load_from_disk
    from test_import import INSTRUCTION, write_instruction

    from distill.adapters.adapters import write_metadata
    from distill.pipeline.store import TraceStore
    from train.adapter_card import write_adapter_card

    monkeypatch.chdir(REPO)  # the shipped mapping names escot.yaml relative to the repository
    variant = REPO / "configs" / "pipelines" / "escot-strategy-first.yaml"
    data, run, datasets = write_instruction(tmp_path / "train.json"), tmp_path / "run", tmp_path / "datasets"
    argv = ["import", "--data", str(data), "--mapping", str(INSTRUCTION), "--split", "train", "--out", str(run),
            "--pipeline", str(variant)]  # fmt: skip
    assert distill(argv) == 0
    traces, _ = TraceStore(run).read()
    assert len(traces) == 4 and {t.config["pipeline"]["name"] for t in traces} == {"escot_strategy_first"}
    assert TraceStore(run).run_info().pipeline["pipeline"]["name"] == "escot_strategy_first"
    assert distill(["datasets", "--traces", str(run), "--out", str(datasets), "--eval-fraction", "0"]) == 0
    completion = load_from_disk(str(datasets / "sr"))["train"][0]["completion"][0]["content"]
    assert list(json.loads(completion)) == ["strategy", "reason"]  # the variant's order, under the variant's name
    for role in ("em", "sr", "re"):
        card = (datasets / role / "README.md").read_text(encoding="utf-8")
        assert '"name": "escot_strategy_first"' in card and '"name": "escot"' not in card, role
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    write_metadata(adapter, {"role": "sr", "base_model": "smollm2-135m", "dataset_dir": str(datasets / "sr"),
                             "tokens_seen": 10, "lora": {"r": 4}})  # fmt: skip
    card = write_adapter_card(adapter).read_text(encoding="utf-8")
    assert "- pipeline: `escot_strategy_first` (declared)" in card

"""TRACE's exemplar retrieval and MERG's reflection audit as options of a declared pipeline (issue 77), run by the real
`Pipeline` on a scripted backend and a real `ExemplarIndex` whose vectors are known (no model).

- a declared role with `exemplars: true` is shown the retrieved cases (precise for its pipeline's emotion role's
  label, else fuzzy; fetched again when a rerun changes the emotion), and `exemplar_copy` reads it;
- `reflection: true` audits the declared stages (their names, titles and briefs) and reruns from the faulted one;
- what cannot work is refused in one line; what the pipelines stored before the options keeps its keys.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError
from test_two_pipelines import _answer

from data_prep.config_file import first_error
from data_prep.retrieval import ExemplarIndex, IndexEntry
from distill.backends.base import GenerationResult
from distill.pipeline.config import PipelineConfig
from distill.pipeline.pipeline import Pipeline
from distill.quality import check_traces
from distill.quality.registry import role_checks
from distill.roles.audit_role import AUDIT_ROLE
from distill.roles.declared import load_pipeline

REPO = Path(__file__).resolve().parents[1]
ESCOT = REPO / "configs" / "pipelines" / "escot.yaml"
HEADER = "Retrieved cases: how human listeners replied in similar situations:"
REVIEWER = "A reviewer found a problem with your previous answer: "
# (emotion, situation, listener reply) at 0, 20, 40 and 80 degrees from every query: fuzzy top-2 = cases 0 and 1,
# precise sadness = 0 and 2, precise fear = 1 and 3.
CASES = [
    ("sadness", "My old dog died last week after fourteen years.", "Fourteen years with a dog leaves the whole house "
     "quiet and empty, I am so sorry for your loss."),
    ("fear", "I heard footsteps downstairs at three in the morning.", "That must have been terrifying, I would have "
     "frozen in bed and called the police."),
    ("sadness", "My best friend moved across the country.", "It is hard when a friend moves so far away."),
    ("fear", "The doctor called me back about my scan.", "Waiting for news like that is so frightening."),
]  # fmt: skip
FEEL = """\
name: feel
labels:
  emotion: [anger, disgust, fear, happiness, sadness, surprise]
roles:
  - name: feel
    title: Emotion Namer
    brief: named the seeker's emotion
    answer:
      emotion: {label: emotion}
    task: Name the seeker's emotion.
  - name: reply
    title: Listener
    brief: wrote the reply
    inputs: [feel]
    exemplars: true
    answer:
      response: {text: 300}
    task: Write the listener's reply.
"""


class QueryAtZero:
    """An embedder whose every query lies at 0 degrees, so each case's score is its cosine."""

    name = "minilm"

    def encode(self, texts, progress=None, batch_size=None):
        return np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (len(texts), 1))


class RecordingIndex(ExemplarIndex):
    """The real index, remembering the emotion each search keyed on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.emotions: list = []

    def query(self, situations, emotions, exclude_conv_ids=None, **options):
        self.emotions += list(emotions)
        return super().query(situations, emotions, exclude_conv_ids, **options)


def _index() -> RecordingIndex:
    angles = np.radians([0, 20, 40, 80])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    entries = [IndexEntry(f"case{i}#1", f"case{i}", *case) for i, case in enumerate(CASES)]
    return RecordingIndex(vectors, entries, embedder="minilm").use_embedder(QueryAtZero())


class ScriptedBackend:
    """Answers a role from its script while it lasts (the role known from the schema asked for), else with a valid
    answer of the schema (a label: its first; a text: `the <field>`). Records every request with its role."""

    name = model = "scripted"

    def __init__(self, roles, script: dict | None = None):
        self.roles, self.script, self.asked = roles, {r: list(a) for r, a in (script or {}).items()}, []

    def generate(self, requests, progress=None):
        results = []
        for request in requests:
            role = next(n for n, spec in self.roles.items() if issubclass(request.schema, spec.schema))
            self.asked.append((role, request))
            answer = self.script[role].pop(0) if self.script.get(role) else _answer(request.schema)
            results.append(GenerationResult(text=json.dumps(answer)))
        return results

    def describe(self):
        return {"backend": self.name}


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _escot_cases(tmp_path: Path) -> Path:
    variant = f"extends: {ESCOT}\nname: escot_cases\nroles:\n  - name: re\n    exemplars: true\n"
    return _file(tmp_path, "cases.yaml", variant)


def _prompt(trace, role: str, iteration: int = 0) -> str:
    [step] = [s for s in trace.steps if (s.role, s.iteration) == (role, iteration)]
    return step.messages[-1]["content"]


def _shown(prompt: str) -> list[str]:
    """The situations of the retrieved cases a prompt shows, in order."""
    return re.findall(r"^- situation: (.*)$", prompt, re.M)


def _run(config: PipelineConfig, dialogue, script=None, index=None):
    backend = ScriptedBackend(config.roles, script)
    [trace] = Pipeline(config, backend, index=index).run([dialogue], progress=False)
    assert trace.status == "ok", trace.failure
    assert not any(backend.script.values()), f"scripted answers never asked for: {backend.script}"
    return trace, backend


# --- exemplar retrieval ----------------------------------------------------------------------------


def test_a_declared_role_with_exemplars_is_shown_the_cases_fuzzy_without_an_emotion_label(tmp_path, tiny_dialogues):
    index = _index()
    config = PipelineConfig(pipeline=str(_escot_cases(tmp_path)))
    trace, _ = _run(config, tiny_dialogues[0], index=index)
    reply = _prompt(trace, "re")
    assert HEADER in reply and _shown(reply) == [CASES[0][1], CASES[1][1]]  # top rag_k by score, any emotion
    assert f"  listener reply: {CASES[0][2]}" in reply
    assert index.emotions == [None]  # escot's em answers free text: no precise search, one fetch
    assert not any(HEADER in _prompt(trace, role) for role in ("em", "es", "ia", "sr"))
    # the base pipeline, same index: no role asks for cases
    plain, _ = _run(PipelineConfig(pipeline=str(ESCOT)), tiny_dialogues[0], index=_index())
    assert HEADER not in _prompt(plain, "re")


def test_a_declared_emotion_label_keys_the_precise_search_and_a_rerun_fetches_again(tmp_path, tiny_dialogues):
    index = _index()
    config = PipelineConfig(pipeline=str(_file(tmp_path, "feel.yaml", FEEL)), reflection=True, max_refinements=1)
    audits = [_audit("feel", ["feel", "reply"], "Fear, not sadness."), _audit(None, ["feel", "reply"])]
    script = {"feel": [{"emotion": "sadness"}, {"emotion": "fear"}], AUDIT_ROLE: audits}
    trace, _ = _run(config, tiny_dialogues[0], script, index)
    assert index.emotions == ["sadness", "fear"]  # the declared role's label, never the built-in asi's
    assert _shown(_prompt(trace, "reply", 0)) == [CASES[0][1], CASES[2][1]]  # precise: sadness
    assert _shown(_prompt(trace, "reply", 1)) == [CASES[1][1], CASES[3][1]]  # fetched again for fear


def test_exemplar_copy_reads_a_declared_role_shown_cases(tmp_path, tiny_dialogues):
    config = PipelineConfig(pipeline=str(_escot_cases(tmp_path)))
    copied = {"response": CASES[0][2]}
    trace, _ = _run(config, tiny_dialogues[0], {"re": [copied]}, _index())
    assert "exemplar_copy" in role_checks("re", config.roles)
    assert "exemplar_copy" not in role_checks("re", PipelineConfig(pipeline=str(ESCOT)).roles)
    found = {(f.role, f.check, f.field) for f in check_traces([trace], progress=False).findings}
    assert ("re", "exemplar_copy", "response") in found


def test_an_exemplar_option_the_index_cannot_key_is_refused_in_one_line(tmp_path):
    order = _file(tmp_path, "late.yaml", _reply_first(FEEL))
    calm = FEEL.replace("[anger, disgust, fear, happiness, sadness, surprise]", "[calm, tense]")
    labels = _file(tmp_path, "calm.yaml", calm)
    for path, said in (
        (order, "exemplars: 'reply' is shown retrieved cases before 'feel' answers the emotion their search keys on"),
        (labels, "exemplars: 'feel' answers emotion label(s) 'calm', 'tense' that the exemplar index cannot search"),
    ):
        with pytest.raises(ValidationError) as err:
            PipelineConfig(pipeline=str(path))
        line = first_error(err.value, prefix="pipeline.")
        assert said in line and "\n" not in line, line
        assert PipelineConfig(pipeline=str(path), rag=False).stages()  # no retrieval: nothing to key
    with pytest.raises(ValidationError, match="valid boolean"):
        PipelineConfig(pipeline=str(_file(tmp_path, "one.yaml", FEEL.replace("exemplars: true", "exemplars: 1"))))


def _reply_first(text: str) -> str:
    """FEEL with its reply role written first and reading nothing: it runs before the emotion role."""
    head, roles = text.split("roles:\n")
    feel, reply = roles.split("  - name: reply\n")
    reply = reply.replace("    inputs: [feel]\n", "")
    return f"{head}roles:\n  - name: reply\n{reply}{feel}"


# --- the reflection audit ----------------------------------------------------------------------------

ESCOT_STAGES = ["em", "es", "ia", "sr", "re"]


def _audit(fault: str | None, stages=ESCOT_STAGES, correction: str = "") -> dict:
    checks = [{"stage": s, "passed": s != fault} for s in stages]
    return {"checks": checks, "earliest_failure": fault, "correction": correction}


def test_reflection_audits_the_declared_stages_and_reruns_from_the_faulted_one(tiny_dialogues):
    config = PipelineConfig(pipeline=str(ESCOT), reflection=True, max_refinements=2, max_attempts=1)
    assert config.runs(AUDIT_ROLE) and not PipelineConfig(pipeline=str(ESCOT)).runs(AUDIT_ROLE)
    sr = [{"reason": f"reason {i}", "strategy": "Question"} for i in range(2)]
    script = {
        "sr": sr,
        "re": [{"response": "reply 0"}, {"response": "reply 1"}],
        AUDIT_ROLE: [_audit("sr", correction="Ground the reason in her loss."), _audit(None)],
    }
    trace, backend = _run(config, tiny_dialogues[0], script)
    walk = [(s.role, s.iteration) for s in trace.steps]
    assert walk == [*((s, 0) for s in ESCOT_STAGES), (AUDIT_ROLE, 0), ("sr", 1), ("re", 1), (AUDIT_ROLE, 1)]
    rerun = _prompt(trace, "sr", 1)
    assert f"{REVIEWER}Ground the reason in her loss." in rerun and '"reason":"reason 0"' in rerun
    assert REVIEWER not in _prompt(trace, "re", 1)
    assert trace.final_iteration == 1 and trace.outputs["sr"] == sr[1]
    assert trace.outputs["re"] == {"response": "reply 1"}
    assert trace.outputs[AUDIT_ROLE]["earliest_failure"] is None
    # what the audit was asked: the declared stages, by their titles and briefs, with their answers
    request = next(r for role, r in backend.asked if role == AUDIT_ROLE)
    system, user = (m["content"] for m in request.messages)
    brief = "chose the support strategy for the next reply and gave the reason for it"
    assert f"- sr (the Strategy Reasoner, who {brief}): its answer fits" in system
    assert "the emotion fits the dialogue" not in system  # TRACE's checks, which name stages escot lacks
    assert "- the Supporter wrote the supporter's reply." in user
    assert "From the Strategy Reasoner:\n- reason: reason 0" in user
    request.schema.model_validate(_audit("ia"))
    with pytest.raises(ValidationError):
        request.schema.model_validate(_audit("srp", stages=["asi", "srp"]))  # only the run's stages can be named


def test_the_audit_names_only_the_stages_a_skip_leaves(tiny_dialogues):
    config = PipelineConfig(pipeline=str(ESCOT), skip=["es", "ia"], reflection=True, max_refinements=0)
    stages = ["em", "sr", "re"]
    trace, backend = _run(config, tiny_dialogues[0], {AUDIT_ROLE: [_audit(None, stages)]})
    [request] = [r for role, r in backend.asked if role == AUDIT_ROLE]
    assert "- em (the Emotion Recogniser" in request.messages[0]["content"]
    assert "Stimulus Finder" not in request.messages[0]["content"]
    with pytest.raises(ValidationError):
        request.schema.model_validate(_audit("es", ["em", "es"]))  # a skipped stage is no stage of the audit


# --- keys, docs --------------------------------------------------------------------------------------


def test_a_declaration_without_the_options_dumps_and_keys_as_before(tmp_path):
    plain = json.dumps(PipelineConfig(pipeline=str(ESCOT)).key_dict(), sort_keys=True)
    assert '"exemplars"' not in plain  # a default left out: escot runs stored before the option keep their keys
    cases = PipelineConfig(pipeline=str(_escot_cases(tmp_path))).key_dict()
    assert [r.get("exemplars") for r in cases["pipeline"]["roles"]] == [None, None, None, None, True]


def _doc_blocks() -> list[dict]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("TRACE's and MERG's mechanisms are options of any declared pipeline")[1]
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", section, re.S)[:2]]


def test_the_docs_example_loads_and_turns_both_options_on(tmp_path):
    variant, config_block = _doc_blocks()
    shutil.copy(ESCOT, tmp_path / "escot.yaml")
    path = tmp_path / "escot-cases.yaml"
    path.write_text(yaml.safe_dump(variant), encoding="utf-8")
    assert load_pipeline(path).role("re").exemplars
    settings = {**config_block["pipeline"], "pipeline": str(path)}
    config = PipelineConfig(**settings)
    assert config.roles["re"].uses_exemplars and config.runs(AUDIT_ROLE)
    assert config.roles[AUDIT_ROLE].inputs == tuple(ESCOT_STAGES)

"""The quality checks' recall on labelled teacher outputs, and their false-positive rates on human replies.

    python benchmarks/quality_recall.py --run sample-train=$R/sample/teacher-train --run ed-test=$R/ed/teacher-test \\
        --run ed-val=$R/ed/teacher-val --out benchmarks/quality_recall.json [--judge CONFIG]

The bad class is the teacher outputs labelled bad by reading them (`--labels`, benchmarks/fixtures/
quality_labels.jsonl: trace key, role, field, label, a category, whether the row is kept back (`held_out`: read
only after the checks were last changed) and in which set it was read (`set`), and the SHA-256 of the text read,
so that a regenerated run whose text differs is refused, never scored against another text's label, or with
`--skip-changed` left out and named in the record's `changed`); the good
class is those labelled good, and every human reply of the ED dev file (`--ed`) and of ESD-CoT's test split
(`--esd`, read through configs/import/esdcot-full-chain.yaml, so its reply role is a declared pipeline's `re`).
Per check: recall on the bad outputs (all, the rows used while the checks were written, the kept-back rows, each
set), false-positive rate on each good set, with Wilson 95% intervals; `any` (any check) is the filter. A bad reply that
is missing (the trace failed) can be caught by no check and no dataset row is made from it: `filtered` counts it
as kept out. No text of the data is written, only counts, check names and dialogue ids, and no path of the machine
that wrote it: the record's command names the runs as `$R/...` (docs/quality-recall.md's R). `--judge` adds the judge
model's `reply_judge` (a config whose `backend:` names it). docs/quality-recall.md says how the labelled runs were
made.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import cpu_flags, cpu_model  # noqa: E402
from data_prep.loaders import load_dialogues  # noqa: E402
from distill.pipeline.store import TraceStore  # noqa: E402
from distill.pipeline.trace import Trace  # noqa: E402
from distill.quality import QualityThresholds, check_replies, check_traces  # noqa: E402
from distill.quality.checks import CHECKS, role_checks  # noqa: E402
from distill.quality.judge import judge_backend  # noqa: E402
from distill.roles.roles import ROLES, RoleSpec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
LABELS = REPO / "benchmarks" / "fixtures" / "quality_labels.jsonl"
ESD_MAPPING = REPO / "configs" / "import" / "esdcot-full-chain.yaml"
LABEL_FIELDS = {"run": str, "trace": str, "role": str, "field": str, "sha256": (str, type(None)), "label": str,
                "category": str, "held_out": bool, "set": str}  # fmt: skip
# why a row is bad: replies (meta, self, prompt, template, other-dialogue, unrelated, echo, missing, loop) and
# rationales (parrot: the label or the prompt restated; copy: the dialogue copied; loop; unrelated)
CATEGORIES = {
    "bad": {
        "meta",
        "self",
        "prompt",
        "template",
        "other-dialogue",
        "unrelated",
        "echo",
        "missing",
        "loop",
        "parrot",
        "copy",
    },
    "good": {"ok"},
}
ANY = "any"  # a key inline figures can name (docs/quality.md: `bench:quality_recall replies.recall.all.any.k`)


class BenchError(ValueError):
    """Bad input: one line naming the file, the row and the field."""


def text_sha256(text: Optional[str]) -> Optional[str]:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_labels(path: Path) -> list[dict[str, Any]]:
    """The label rows, each checked for its fields, its label and its category."""
    if not path.is_file():
        raise BenchError(f"{path}: no such labels file")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchError(f"{path}: row {number}: not JSON ({exc.msg})") from None
        for name, kind in LABEL_FIELDS.items():
            if not isinstance(row.get(name), kind):
                raise BenchError(f"{path}: row {number}: field '{name}' missing or of the wrong type")
        if row["category"] not in CATEGORIES.get(row["label"], ()):
            raise BenchError(
                f"{path}: row {number}: field 'label'/'category': {row['label']}/{row['category']} is not one of "
                + ", ".join(f"{label}/{'|'.join(sorted(cats))}" for label, cats in CATEGORIES.items())
            )
        rows.append(row)
    return rows


def _field_text(trace: Trace, role: str, field: str) -> Optional[str]:
    value = (trace.outputs.get(role) or {}).get(field)
    return value if isinstance(value, str) else None


def teacher_outcomes(labels, runs: dict[str, Path], thresholds, judge, changed=None) -> list[dict[str, Any]]:
    """Per label row: its label, category, kept-back flag, whether the text is missing, and the checks that
    failed on its field (the run's own checks, run over the whole run as `distill inspect` runs them). A row whose
    text is not the text labelled is refused, or, given a `changed` list, left out and named there."""
    wanted = sorted({row["run"] for row in labels})
    unknown = [name for name in wanted if name not in runs]
    if unknown:
        raise BenchError(f"the labels name run '{unknown[0]}': pass --run {unknown[0]}=<trace run folder>")
    out = []
    for name in wanted:
        traces, _ = TraceStore(runs[name]).read()
        if not traces:
            raise BenchError(f"{runs[name]}: no readable trace (--run {name})")
        report = check_traces(traces, thresholds, progress=False, judge=judge)
        failed = defaultdict(set)
        for f in report.findings:
            failed[(f.key, f.role, f.field.split("[")[0])].add(f.check)
        by_key = {t.key: t for t in traces}
        for row in (r for r in labels if r["run"] == name):
            trace = by_key.get(row["trace"])
            if trace is None:
                raise BenchError(f"{runs[name]}: no trace {row['trace']} (labelled in --labels): another run?")
            text = _field_text(trace, row["role"], row["field"])
            if text_sha256(text) != row["sha256"] and changed is not None:
                changed.append({key: row[key] for key in ("run", "trace", "role", "field", "set")})
                continue
            if text_sha256(text) != row["sha256"]:
                raise BenchError(
                    f"{runs[name]}: trace {row['trace']} {row['role']}.{row['field']}: its text is not the text "
                    "labelled (another generation of the run?)"
                )
            checks = failed[(row["trace"], row["role"], row["field"])]
            out.append({**row, "missing": text is None, "failed": sorted(checks)})
    return out


def _esd_dialogues_and_replies(path: Path) -> tuple[list, list[str], Mapping[str, RoleSpec]]:
    from distill.imports import chains
    from distill.imports.mapping import load_mapping

    mapping = load_mapping(ESD_MAPPING)
    config = chains.pipeline_config(mapping, str(ESD_MAPPING))
    rows = chains.load_rows(path, mapping.format)
    report = chains.ImportReport(rows=len(rows))
    traces = [t for n, row in enumerate(rows, 1) if (t := chains.to_trace(mapping, config, row, n, report))]
    kept = [t for t in traces if isinstance(t.response, str)]
    return [t.dialogue for t in kept], [t.response for t in kept], config.roles


def human_outcomes(ed: Path, esd: Path, thresholds, judge) -> dict[str, list[tuple[str, set[str]]]]:
    """Per human set: (dialogue id, checks failed) for every reply, each set read as one run (`check_replies`) by its
    pipeline's reply role: ED's as TRACE's ers, ESD-CoT's as escot's `re` (prompt_echo reads that role's prompt)."""
    sets = {}
    for name, (dialogues, replies, roles) in {
        "ed-dev-human": _ed(ed),
        "esd-cot-test-human": _esd_dialogues_and_replies(esd),
    }.items():
        report = check_replies(replies, dialogues, thresholds, judge=judge, roles=roles)
        failed = defaultdict(set)
        for f in report.findings:
            failed[f.dialogue_id].add(f.check)
        sets[name] = [(d.id, failed[d.id]) for d in dialogues]
    return sets


def _ed(path: Path) -> tuple[list, list[str], Mapping[str, RoleSpec]]:
    dialogues = [d for d in next(iter(load_dialogues(path).splits.values())) if (d.gold_response or "").strip()]
    return dialogues, [d.gold_response for d in dialogues], ROLES


def wilson(k: int, n: int, z: float = 1.959964) -> dict[str, Any]:
    """k/n with its Wilson score 95% interval (exact at 0 and n, where the normal interval collapses)."""
    if n == 0:
        return {"k": 0, "n": 0, "rate": None, "ci_low": None, "ci_high": None}
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"k": k, "n": n, "rate": round(p, 4), "ci_low": round(max(0.0, centre - half), 4),
            "ci_high": round(min(1.0, centre + half), 4)}  # fmt: skip


def _rates(outcomes: list[set[str]], checks: list[str]) -> dict[str, dict[str, Any]]:
    figures = {check: wilson(sum(check in o for o in outcomes), len(outcomes)) for check in checks}
    figures[ANY] = wilson(sum(bool(o & set(checks)) for o in outcomes), len(outcomes))
    return figures


def figures(teacher: list[dict[str, Any]], human: dict[str, list[tuple[str, set[str]]]], judged: bool) -> dict:
    """Per kind of output (replies, rationales): recall on the bad rows (all, dev, kept back), false positives on
    the good ones, each check and any check; which checks alone catch a bad reply; the human false positives."""
    result: dict[str, Any] = {}
    for kind, roles in (("replies", {"ers"}), ("rationales", {"asi", "srp"})):
        rows = [r for r in teacher if r["role"] in roles]
        checks = sorted({c for role in roles for c in role_checks(role, judged=judged)}, key=list(CHECKS).index)
        bad = [r for r in rows if r["label"] == "bad" and not r["missing"]]
        part = {
            "checks": checks,
            "bad": len(bad),
            "missing": sum(r["missing"] and r["label"] == "bad" for r in rows),
            "categories": _count(r["category"] for r in rows),
            "recall": {
                "all": _rates([set(r["failed"]) for r in bad], checks),
                "dev": _rates([set(r["failed"]) for r in bad if not r["held_out"]], checks),
                "held_out": _rates([set(r["failed"]) for r in bad if r["held_out"]], checks),
            },
            # each labelled set alone, each check and any: the rows read while the checks were written, and each
            # set kept back (the last one read after the checks were frozen is the recall that was not tuned)
            "recall_by_set": {
                name: _rates([set(r["failed"]) for r in bad if r["set"] == name], checks)
                for name in sorted({r["set"] for r in bad})
            },
            # what `distill datasets --quality filter` keeps out: a bad output some check fails, or one that is
            # missing (its trace failed: no row is made of it), per set
            "filtered": {
                name: wilson(
                    sum(r["missing"] or bool(set(r["failed"]) & set(checks)) for r in rows_in),
                    len(rows_in),
                )
                for name, rows_in in _by_set([r for r in rows if r["label"] == "bad"]).items()
            },
            "recall_by_category": {
                cat: _rates([set(r["failed"]) for r in bad if r["category"] == cat], checks)[ANY]
                for cat in sorted({r["category"] for r in bad})
            },
            "only_check": _count(r["failed"][0] for r in bad if len(set(r["failed"]) & set(checks)) == 1),
            "false_positives_on_good": _rates([set(r["failed"]) for r in rows if r["label"] == "good"], checks),
        }
        result[kind] = part
    reply_checks = result["replies"]["checks"]
    result["human"] = {
        name: {**_rates([failed for _, failed in rows], reply_checks),
               "flagged_ids": sorted(did for did, failed in rows if failed & set(reply_checks))}
        for name, rows in human.items()
    }  # fmt: skip
    return result


def _by_set(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows, all of them and then each set's."""
    sets = {"all": rows}
    for name in sorted({r["set"] for r in rows}):
        sets[name] = [r for r in rows if r["set"] == name]
    return sets


def _count(items) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[item] += 1
    return dict(sorted(counts.items()))


def _runs(pairs: list[str]) -> dict[str, Path]:
    runs = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise BenchError(f"--run {pair!r}: expected NAME=FOLDER (a trace run the labels name)")
        runs[name] = Path(path)
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", action="append", default=[], help="NAME=FOLDER: a trace run the labels name (repeat)")
    p.add_argument("--labels", type=Path, default=LABELS, help="the label rows (JSON lines)")
    p.add_argument("--ed", type=Path, default=SHARED / "ed_ekman_dev.csv", help="ED dev: its human replies")
    p.add_argument("--esd", type=Path, default=SHARED / "esd-cot" / "test.json", help="ESD-CoT test: its replies")
    p.add_argument("--thresholds", type=Path, default=None, help="YAML of QualityThresholds fields to change")
    p.add_argument("--judge", default=None, help="a config whose `backend:` is the judge model (reply_judge)")
    p.add_argument("--out", type=Path, default=None, help="write the record (JSON) here")
    p.add_argument(
        "--skip-changed",
        action="store_true",
        help="leave out a label row whose regenerated text is not the text labelled (the record names it)",
    )
    args = p.parse_args(argv)
    start = time.perf_counter()
    try:
        for path, flag in ((args.ed, "--ed"), (args.esd, "--esd")):
            if not path.is_file():
                raise BenchError(f"{path}: no such file ({flag})")
        labels, runs = read_labels(args.labels), _runs(args.run)
        thresholds = QualityThresholds.from_file(args.thresholds)
        judge = judge_backend(args.judge) if args.judge else None
        changed: Optional[list[dict[str, str]]] = [] if args.skip_changed else None
        teacher = teacher_outcomes(labels, runs, thresholds, judge, changed)
        human = human_outcomes(args.ed, args.esd, thresholds, judge)
    except ValueError as exc:  # BenchError, and a bad thresholds or judge config
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = figures(teacher, human, judge is not None)
    record = _record(args, labels, judge, time.perf_counter() - start, {"changed": changed, **result})
    _print(result)
    if changed:
        print(f"left out {len(changed)} label rows whose text is not the text labelled (--skip-changed)")
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


def _record(args, labels, judge, seconds: float, result: dict) -> dict[str, Any]:
    """The record: the command as it reads on any machine (`_portable_paths`), provenance and the figures."""
    runs = _runs(args.run)
    judge_config = Path(args.judge) if args.judge else None
    files = [args.labels, args.ed, args.esd, args.out, args.thresholds, judge_config]
    named = _portable_paths([*runs.values(), *(path for path in files if path is not None)])
    command = ["benchmarks/quality_recall.py"]
    command += [arg for name, path in runs.items() for arg in ("--run", f"{name}={named[path]}")]
    command += ["--labels", named[args.labels]] if args.labels != LABELS else []
    command += ["--ed", named[args.ed], "--esd", named[args.esd]]
    command += ["--thresholds", named[args.thresholds]] if args.thresholds is not None else []
    command += ["--judge", named[judge_config]] if judge_config is not None else []
    command += ["--out", named[args.out]] if args.out is not None else []
    command += ["--skip-changed"] if args.skip_changed else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return {
        "command": "python " + " ".join(_shell_word(arg) for arg in command),
        "commit": commit.stdout.strip() or None,
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "cpu_flags": cpu_flags()},
        "labels": {"file": named[args.labels], "rows": len(labels), "held_out": sum(r["held_out"] for r in labels)},
        "runs": {name: named[path] for name, path in runs.items()},
        "human_files": {"ed": named[args.ed], "esd": named[args.esd]},
        "judge": judge.describe() if judge is not None else None,
        "thresholds": QualityThresholds.from_file(args.thresholds).model_dump(),
        "seconds": round(seconds, 1),
        **result,
    }


def _shell_word(arg: str) -> str:
    """An argument quoted for the shell, its `$R` left bare so that the command runs where R is set."""
    return "$R/".join(shlex.quote(part) if part else "" for part in arg.split("$R/"))


def _portable_paths(paths: list[Path]) -> dict[Path, str]:
    """Each path as it reads on any machine: relative to the repository when inside it, `../shared/...` when in the
    shared data beside it (the guide's layout), else `$R/...`, R being the folder the other paths share (the runs'
    folder, docs/quality-recall.md's `R=`), so that no record holds the absolute paths of the machine that wrote it."""
    shared = (REPO.parent / "shared").resolve()
    resolved = {path: path.resolve() for path in paths}
    named, outside = {}, []
    for path, full in resolved.items():
        if full.is_relative_to(REPO):
            named[path] = full.relative_to(REPO).as_posix()
        elif full.is_relative_to(shared):
            named[path] = "../shared/" + full.relative_to(shared).as_posix()
        else:
            outside.append(path)
    if outside:
        root = Path(os.path.commonpath([resolved[path] for path in outside]))
        if root in {resolved[path] for path in outside}:  # one path, or one holding the others: R is its folder
            root = root.parent
        for path in outside:
            named[path] = "$R/" + resolved[path].relative_to(root).as_posix()
    return named


def _print(result: dict) -> None:
    for kind in ("replies", "rationales"):
        part = result[kind]
        print(f"{kind}: {part['bad']} bad present, {part['missing']} missing; categories {part['categories']}")
        print(f"  {'check':<20} {'recall all':>16} {'dev':>12} {'kept back':>12} {'FP good':>12}")
        for check in [*part["checks"], ANY]:
            cells = [part["recall"][s][check] for s in ("all", "dev", "held_out")]
            cells.append(part["false_positives_on_good"][check])
            print(f"  {check:<20} " + " ".join(f"{c['k']:>5}/{c['n']:<5}" for c in cells))
    for name, rates in result["human"].items():
        fired = {c: r["k"] for c, r in rates.items() if isinstance(r, dict) and r.get("k")}
        print(f"{name}: {rates[ANY]['k']}/{rates[ANY]['n']} flagged by any check {fired}")


if __name__ == "__main__":
    sys.exit(main())

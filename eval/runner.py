"""The one stage runner of the recipes (`eval students`, `eval curve`, the quickstart): a recipe is a list of named
stages, and the runner runs each or reuses it, saying why in one line, and records what it cost in
`<out>/stages.json`.

A stage either declares its key (`Stage.key`: the named inputs of `distill.pipeline.stage_key`), which the runner
checks against the key stored in the stage's folder and writes once the stage finished, or checks its own inputs
inside (an in-process `distill import`, a `python -m train` per role, a compare report that holds its own key):
its `run` then returns why it ran, None when its own check reused it.

A stage's seconds are `time.perf_counter` around it and its peak RSS is `eval.compare.cost.PeakRSS`'s:
/proc/self/statm sampled every 0.1 s while it runs, the whole process (the models loaded so far included). A reused
stage keeps the record of the run that made it, and says it was reused this time.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from distill.pipeline.stage_key import read_key, stage_key, write_key

STAGES_FILE = "stages.json"
Inputs = Mapping[str, Any]


@dataclass
class Stage:
    """One named stage: its output `folder`, its `key` (the inputs, or a callable giving them; None when `run`
    checks its own inputs and returns why it ran) and `run`, which makes the folder's content."""

    name: str
    folder: Path
    run: Callable[[], Optional[str]]
    key: Union[Inputs, Callable[[], Inputs], None] = None


def key_change(stored: Optional[Mapping[str, str]], now: Optional[Mapping[str, str]]) -> Optional[str]:
    """Why a stage keyed `stored` is made again for the key `now`, in a few words; None when they are the same."""
    if stored == now:
        return None
    if stored is None:
        return "no stored key"
    fields = [name for name in [*(now or {}), *(n for n in stored if n not in (now or {}))]
              if stored.get(name) != (now or {}).get(name)]  # fmt: skip
    return f"key changed in {', '.join(fields)}"


class Runner:
    """The stages of one recipe's `out` folder; their records (`stages.json`) written after every stage, so a killed
    run keeps those that finished."""

    def __init__(self, out: Path):
        self.path = Path(out) / STAGES_FILE
        self.records: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            self.records = json.loads(self.path.read_text(encoding="utf-8"))

    def run(self, stage: Stage) -> Path:
        """Run `stage` or reuse it, record its cost, print why; returns its folder."""
        from eval.compare.cost import PeakRSS

        start = time.perf_counter()
        with PeakRSS() as rss:
            if stage.key is None:
                why = stage.run()
            else:
                inputs = stage.key() if callable(stage.key) else stage.key
                why = key_change(read_key(stage.folder), stage_key(inputs))
                if why is not None:
                    stage.run()
                    write_key(stage.folder, inputs)
        self._record(stage.name, why, time.perf_counter() - start, rss)
        return stage.folder

    def _record(self, name: str, why: Optional[str], seconds: float, rss) -> None:
        if why is None and name in self.records:
            self.records[name]["reused"] = True
        else:
            self.records[name] = {
                "seconds": round(seconds, 2),
                "peak_rss_mb": round(rss.peak_mb),
                "memory_method": rss.method,
                "finished": round(time.time()),
                "reused": why is None,
            }
        self._save()
        what = "reused: key unchanged" if why is None else f"ran: {why}"
        record = self.records[name]
        print(f"[stage] {name}: {what} ({record['seconds']} s, peak RSS {record['peak_rss_mb']} MiB when it ran)",
              flush=True)  # fmt: skip

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.records, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

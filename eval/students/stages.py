"""What each stage of `eval students` cost: its seconds and peak RSS, kept across reruns in `<out>/stages.json`.

A stage runs in this process (an import, a dataset build, a `python -m train` run, the compare), so its seconds
are `time.perf_counter` around it and its peak RSS is `eval.compare.cost.PeakRSS`'s: /proc/self/statm sampled
every 0.1 s while it runs, the whole process (the models loaded so far included). A reused stage keeps the
record of the run that made it, and says it was reused this time.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STAGES_FILE = "stages.json"


class StageLog:
    """The stage records of one `eval students` folder, written after every stage (a killed run keeps them)."""

    def __init__(self, out: Path):
        self.path = Path(out) / STAGES_FILE
        self.records: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            self.records = json.loads(self.path.read_text(encoding="utf-8"))

    @contextmanager
    def stage(self, name: str) -> Iterator[dict[str, Any]]:
        """Time the block and sample its peak RSS; the block sets `ran` False in the yielded dict when it reused
        its stage (the stored record, from the run that made it, is then kept)."""
        from eval.compare.cost import PeakRSS

        status: dict[str, Any] = {"ran": True}
        start = time.perf_counter()
        with PeakRSS() as rss:
            yield status
        if not status["ran"] and name in self.records:
            self.records[name]["reused"] = True
        else:
            self.records[name] = {
                "seconds": round(time.perf_counter() - start, 2),
                "peak_rss_mb": round(rss.peak_mb),
                "memory_method": rss.method,
                "finished": round(time.time()),
                "reused": not status["ran"],
            }
        self._save()
        what = "reused" if not status["ran"] else "ran"
        record = self.records[name]
        print(f"[stage] {name}: {what} ({record['seconds']} s, peak RSS {record['peak_rss_mb']} MiB when it ran)",
              flush=True)  # fmt: skip

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.records, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

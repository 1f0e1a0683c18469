"""Load a trained adapter with plain PEFT and check it holds the weights that were trained.

    python benchmarks/check_adapter.py runs/multigpu/fsdp/asi

Prints `train.adapter_save.check_loaded_adapter`'s report as one JSON line; exits 1 unless it is ok.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from train.adapter_save import check_loaded_adapter

if __name__ == "__main__":
    report = check_loaded_adapter(Path(sys.argv[1]))
    print(json.dumps(report))
    sys.exit(0 if report["ok"] else 1)

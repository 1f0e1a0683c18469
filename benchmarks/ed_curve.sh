#!/usr/bin/env bash
# Does distillation pay? The real-data learning curves (docs/distillation-pays.md), every step:
# the shared ED file split 80/20 by conversation (seed 0), the exemplar index over the train part,
# gold-guided teacher traces for the first N_TRACES train conversations (the embedded model, resumable),
# then `eval curve` with configs/eval/curve-ed.yaml (or CONFIG), which reads RUN's folders.
# Every step resumes: rerunning after a kill redoes only the unfinished part.
# Usage: bash benchmarks/ed_curve.sh [SOURCE=../shared/data/ed_ekman_dev.csv] [RUN=runs/ed] [N_TRACES=160]
#        [CONFIG=configs/eval/curve-ed.yaml]
set -euo pipefail
SOURCE=${1:-../shared/data/ed_ekman_dev.csv}
RUN=${2:-runs/ed}
N_TRACES=${3:-160}
CONFIG=${4:-configs/eval/curve-ed.yaml}
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }

[[ -f "$RUN/dialogues/dataset_dict.json" ]] || python -m data_prep dialogues --source "$SOURCE" \
  --split-ratios 0.8,0,0.2 --seed 0 --out "$RUN/dialogues"
[[ -f "$RUN/index/index.json" ]] || python -m data_prep index --dialogues "$RUN/dialogues" --split train \
  --out "$RUN/index"
stamp "teacher traces: the first $N_TRACES train conversations, gold-guided"
python -m distill generate --config configs/teacher/local.yaml --dialogues "$RUN/dialogues" --split train \
  --limit "$N_TRACES" --index "$RUN/index" --out "$RUN/teacher-train" --gold-emotion
stamp "curve: $CONFIG"
# the config names runs/ed; another RUN gets a copy of it with its own paths
if [[ "$RUN" != "runs/ed" ]]; then
  sed "s#runs/ed/#$RUN/#g" "$CONFIG" > "$RUN/curve.yaml"; CONFIG=$RUN/curve.yaml
fi
python -m eval curve --config "$CONFIG" --out "$RUN/curve"
stamp "done: $RUN/curve/curve.md"

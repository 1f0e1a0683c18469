#!/usr/bin/env bash
# Does distillation pay? The real-data learning curves (docs/guides/curves.md; runs: docs/history.md), every step:
# the shared ED file split 80/20 by conversation (seed 0), the exemplar index over the train part,
# gold-guided teacher traces for the first N_TRACES train conversations (the embedded model, resumable,
# into the curve config's `traces:` folder), then `eval curve` with CONFIG, which reads RUN's folders.
# Every step resumes: rerunning after a kill redoes only the unfinished part.
# Usage: [TEACHER=configs/teacher/local.yaml] bash benchmarks/ed_curve.sh [SOURCE=../shared/data/ed_ekman_dev.csv]
#        [RUN=runs/ed] [N_TRACES=160] [CONFIG=configs/eval/curve-ed.yaml] [OUT=RUN/curve]
# The emotion agent at all 1,010 train conversations, with the levers (the teacher runs asi alone):
#   TEACHER=configs/teacher/local-emotion.yaml bash benchmarks/ed_curve.sh ../shared/data/ed_ekman_dev.csv \
#       runs/ed 1010 configs/eval/curve-ed-emotion.yaml runs/ed/curve-emotion
set -euo pipefail
SOURCE=${1:-../shared/data/ed_ekman_dev.csv}
RUN=${2:-runs/ed}
N_TRACES=${3:-160}
CONFIG=${4:-configs/eval/curve-ed.yaml}
OUT=${5:-$RUN/curve}
TEACHER=${TEACHER:-configs/teacher/local.yaml}
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }

# the config names runs/ed; another RUN gets a copy of it with its own paths
if [[ "$RUN" != "runs/ed" ]]; then
  mkdir -p "$RUN"; sed "s#runs/ed/#$RUN/#g" "$CONFIG" > "$RUN/$(basename "$CONFIG")"; CONFIG=$RUN/$(basename "$CONFIG")
fi
TRACES=$(python -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["traces"])' "$CONFIG")

[[ -f "$RUN/dialogues/dataset_dict.json" ]] || python -m data_prep dialogues --source "$SOURCE" \
  --split-ratios 0.8,0,0.2 --seed 0 --out "$RUN/dialogues"
[[ -f "$RUN/index/index.json" ]] || python -m data_prep index --dialogues "$RUN/dialogues" --split train \
  --out "$RUN/index"
stamp "teacher traces ($TEACHER): the first $N_TRACES train conversations, gold-guided, into $TRACES"
python -m distill generate --config "$TEACHER" --dialogues "$RUN/dialogues" --split train \
  --limit "$N_TRACES" --index "$RUN/index" --out "$TRACES" --gold-emotion
stamp "curve: $CONFIG"
python -m eval curve --config "$CONFIG" --out "$OUT"
stamp "done: $OUT/curve.md"

#!/usr/bin/env bash
# The levers of the real-data experiment, each measured against the quickstart's student on the same
# held-out ED dialogues with paired bootstrap CIs (docs/real-data.md's levers table comes from this).
# It starts from a finished real-data quickstart run (docs/real-data.md's command), reuses its traces, index
# and adapters, and changes one thing per system:
#   student-ers-t0.8/1.0  ers decoded at temperature 0.8 or 1.0 instead of TRACE's 0.5 (no retraining)
#   student-asi-3ep       asi trained its full 3 epochs (no token budget) instead of ~1.8 at 60k tokens
#   student-ers-teacher   ers trained on the teacher's replies instead of the human ones
#   student-traces-N      asi and ers trained at the same 60k-token budget on N traces instead of 400
#   student-traces-N+ers-t1.0   both: the levers that reach the targets, together
# Usage: bash benchmarks/ed_levers.sh [RUN=runs/ed-real] [OUT=runs/ed-levers] [N_TRACES=1010]
set -euo pipefail
RUN=$(realpath "${1:-runs/ed-real}")
OUT=$(realpath -m "${2:-runs/ed-levers}")
N_TRACES=${3:-1010}
TRAIN="python -m train --config configs/train/smollm2-cpu.yaml"
CORE_ROLES=$(python -c 'from distill.roles.roles import CORE_ROLES; print(*CORE_ROLES)')  # the registry's list
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }

# One folder of four adapters per system: the lever's own, the rest linked from the quickstart's.
adapter_set() {  # adapter_set DIR ROLE_TRAINED_HERE...
  local dir=$1; shift
  for role in $CORE_ROLES; do
    [[ " $* " == *" $role "* ]] || ln -sfn "$RUN/adapters/$role" "$dir/$role"
  done
}

# The eval config: the quickstart's systems plus the levers named so far. Rerunning `eval compare` on
# the same folder reuses every system it generated before (same spec), the quickstart's student too.
evaluate() {  # evaluate LEVER...
  mkdir -p "$OUT/eval/systems"
  [[ -d "$OUT/eval/systems/student" ]] || cp -r "$RUN/eval/systems/student" "$OUT/eval/systems/student"
  python - "$RUN" "$OUT" "$@" <<'PY'
import sys, yaml
run, out, *levers = sys.argv[1:]
cfg = yaml.safe_load(open(f"{run}/eval-config.yaml"))
student = next(s for s in cfg["systems"] if s["name"] == "student")
def system(name, adapters=None, **pipeline):
    backend = {**student["backend"], **({"adapters": f"{out}/{adapters}"} if adapters else {})}
    return {"name": name, "backend": backend, "pipeline": {**student["pipeline"], **pipeline}}
known = {f"ers-t{t}": dict(temperatures={"ers": float(t)}) for t in ("0.8", "1.0")}
def combined(name):  # "a+b": each part's adapters or decoding
    return {k: v for part in name.split("+") for k, v in known.get(part, {"adapters": part}).items()}
cfg["systems"] += [system(f"student-{name}", **combined(name)) for name in levers]
yaml.safe_dump(cfg, open(f"{out}/eval-config.yaml", "w"), sort_keys=False)
PY
  python -m eval compare --config "$OUT/eval-config.yaml" --out "$OUT/eval"
  stamp "evaluated: $OUT/eval/report.md"
}

# A rerun skips the adapters it trained already.
train_lever() {  # train_lever DATASETS OUT_NAME ROLES [train flags...]
  local data=$1 dir=$OUT/$2 roles=$3; shift 3
  if [[ -f "$dir/${roles##*,}/adapter_model.safetensors" ]]; then stamp "reusing $dir"; else
    $TRAIN --dataset_name "$data" --output_dir "$dir" --roles "$roles" "$@"; fi
  adapter_set "$dir" ${roles//,/ }
}

stamp "asi: full 3 epochs"
train_lever "$RUN/datasets" asi-3ep asi --max_tokens_budget 0

stamp "ers: the teacher's replies as targets"
[[ -d "$OUT/datasets-ers-teacher" ]] || python -m distill datasets --traces "$RUN/teacher-train" \
  --out "$OUT/datasets-ers-teacher" --roles ers --require-gold-emotion --ers-target teacher
train_lever "$OUT/datasets-ers-teacher" ers-teacher ers
evaluate ers-t0.8 ers-t1.0 asi-3ep ers-teacher

stamp "traces: $N_TRACES gold-guided train traces (the first 400 reused)"
[[ -d "$OUT/teacher-train" ]] || cp -r "$RUN/teacher-train" "$OUT/teacher-train"
python -m distill generate --config configs/teacher/local.yaml --dialogues "$RUN/dialogues" --split train \
  --limit "$N_TRACES" --index "$RUN/index" --out "$OUT/teacher-train" --gold-emotion
[[ -d "$OUT/datasets-traces-$N_TRACES" ]] || python -m distill datasets --traces "$OUT/teacher-train" \
  --out "$OUT/datasets-traces-$N_TRACES" --roles asi,ers --require-gold-emotion --ers-target gold
train_lever "$OUT/datasets-traces-$N_TRACES" "traces-$N_TRACES" asi,ers
evaluate ers-t0.8 ers-t1.0 asi-3ep ers-teacher "traces-$N_TRACES" "traces-$N_TRACES+ers-t1.0"
stamp "done"

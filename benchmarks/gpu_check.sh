#!/usr/bin/env bash
# The prepared GPU run, on a lent GPU machine that has no network: the README's GPU workflow with the real embedded
# weights, then `eval students` on ESD-CoT (benchmarks/gpu_workflow.py), with each stage's seconds and peak GPU memory.
#
# 1. Here, once: `bash benchmarks/gpu_carry.sh` packs the wheels the machine lacks, the embedded models (the 98 MB
#    SmolLM2 GGUF, MiniLM) and ESD-CoT into .gpu-carry/part-00 ... part-NN (56 MiB each; git-ignored). No part holds a
#    model whole: the GGUF spans two parts, joined there with the rest and checked against .gpu-carry/bundle.sha256.
# 2. There, one device call per part, back to back: the machine keeps /tmp only while it is warm (30 s after a call),
#    and each call may carry 64 MiB in all, the repository's ~3 MB tree included. Every call but the last stashes:
#        run(command="bash benchmarks/gpu_check.sh stash .gpu-carry/part-00", carry=[".gpu-carry/part-00"])
#        ... the same for part-01 to the part before the last (the first call also prints the image's versions);
#    the last stashes its part, joins, installs into /tmp/site and runs the workflow (at most 10 minutes a call):
#        run(command="COMMIT=<short sha> bash benchmarks/gpu_check.sh run .gpu-carry/part-04", timeout_s=600,
#            carry=[".gpu-carry/part-04", ".gpu-carry/bundle.sha256"])
#    A part missing there (the machine went back between calls) fails in one line before anything runs: carry again
#    from part-00.
# 3. What comes back ($OUT, at most 8 files): stages.json (each stage's command, exit status, seconds, peak GPU MiB,
#    peak RSS), log.txt, the compare's report.json and the records (records/gpu-workflow.json,
#    records/gpu-students-<n>seed.json, naming the card). Commit those records with the card's name.
#
# Settings (environment): BUDGET_S (seconds this script may take in all, default 570: the workflow gets what is left
# after set-up), OUT (default ./gpu-out), WORKFLOW_ARGS (more benchmarks/gpu_workflow.py flags, e.g. "--seeds 42
# --students-n 400"; its defaults are the issue's: ESD-CoT's 1,195 train dialogues, seeds 42 43 44, students traces
# and direct, one epoch). `bash benchmarks/gpu_check.sh speed` instead runs the earlier check (gpu_train.py on
# random-initialised bases from .whl/, as run on an H200 on 2026-11-27: docs/performance.md#on-a-gpu).
set -euo pipefail
MODE=${1:-run}
PART=${2:-}
OUT=${OUT:-$PWD/gpu-out}
BUDGET_S=${BUDGET_S:-570}
STASH=${STASH:-/tmp/gpu-carry}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT" "$STASH"
export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1
# nothing outside the machine can be reached: never wait on the hub
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TQDM_DISABLE=1 HF_DATASETS_DISABLE_PROGRESS_BARS=1 # keep the log to the results

stash() {
    [[ -f "$PART" ]] || { echo "gpu_check: no carried part at '$PART' (carry it: see this file's header)" >&2; exit 2; }
    cp "$PART" "$STASH/"
    [[ -f .gpu-carry/bundle.sha256 ]] && cp .gpu-carry/bundle.sha256 "$STASH/"
    echo "gpu_check: stashed $(basename "$PART") ($(ls "$STASH" | grep -c '^part-') parts in $STASH)"
}

image_versions() {
    nvidia-smi -L || true
    python3 -m pip list 2>/dev/null | grep -iE "^(torch|transformers|accelerate|peft|pyarrow|fsspec|huggingface.hub|tokenizers|safetensors|numpy|pandas|psutil) " || true
}

unpack() {
    local want parts
    want=$(cat "$STASH/bundle.sha256" 2>/dev/null) || { echo "gpu_check: bundle.sha256 not carried" >&2; exit 2; }
    parts=$(ls "$STASH"/part-* | sort)
    if [[ "$(cat $parts | sha256sum | cut -d' ' -f1)" != "$want" ]]; then
        echo "gpu_check: the parts in $STASH ($(echo $parts | wc -w)) do not make the bundle: a part is missing or" \
            "the machine went back between calls; carry again from part-00" >&2
        exit 2
    fi
    rm -rf "$STASH/bundle" && mkdir -p "$STASH/bundle" && cat $parts | tar -C "$STASH/bundle" -xf -
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$STASH"/bundle/wheels/*.whl
    cp -r "$STASH"/bundle/site/* "$SITE/"
    # `accelerate launch --no_python trace-distill`: the console script pip would install with the package
    mkdir -p /tmp/bin && printf '#!/usr/bin/env python3\nimport sys\nfrom eval.console import main\nsys.exit(main())\n' \
        >/tmp/bin/trace-distill && chmod +x /tmp/bin/trace-distill
    export PATH=/tmp/bin:$PATH
}

run() {
    export TRACE_DISTILL_CACHE=/tmp/td-cache
    {
        echo "== $(date -u +%FT%TZ) commit ${COMMIT:-?}"
        image_versions
        python3 -c 'import data_prep, distill, train.sft, eval.compare, trl, peft, datasets, llguidance, bpe_openai'
        echo "== imports ok at ${SECONDS}s"
        # once: the GGUF dequantised to the safetensors cache every stage loads (not a stage's time)
        python3 -c 'from data_prep.models import resolve_model; print(resolve_model("smollm2-135m"))'
        echo "== embedded model converted at ${SECONDS}s"
    } 2>&1 | tee "$OUT/setup.txt"
    local left=$((BUDGET_S - SECONDS - 15))
    # shellcheck disable=SC2086  # WORKFLOW_ARGS is a list of flags
    python3 benchmarks/gpu_workflow.py --device cuda --out /tmp/gpu-run --esdcot "$STASH/bundle/esd-cot" \
        --budget-s "$left" ${COMMIT:+--commit "$COMMIT"} ${WORKFLOW_ARGS:-} || echo "== gpu_workflow exited $?"
    cp /tmp/gpu-run/stages.json /tmp/gpu-run/log.txt "$OUT/" 2>/dev/null || true
    cp /tmp/gpu-run/eval/report.json "$OUT/" 2>/dev/null || true
    mkdir -p "$OUT/records" && cp /tmp/gpu-run/records/*.json "$OUT/records/" 2>/dev/null || true
    echo "== done at ${SECONDS}s"
}

case "$MODE" in
stash)
    stash
    image_versions
    ;;
run)
    [[ -z "$PART" ]] || stash
    unpack
    run
    ;;
speed)
    bash "$(dirname "$0")/gpu_train_check.sh"
    ;;
*)
    echo "gpu_check: unknown mode '$MODE' (stash PART, run [PART] or speed)" >&2
    exit 2
    ;;
esac

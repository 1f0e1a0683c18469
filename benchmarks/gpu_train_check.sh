#!/usr/bin/env bash
# benchmarks/gpu_train.py on a lent GPU machine that has no network: one command, fails fast. (Until issue 80 this was
# benchmarks/gpu_check.sh, which now runs the whole workflow; `bash benchmarks/gpu_check.sh speed` starts this one.)
#
#     bash benchmarks/gpu_train_check.sh      # run from the repo root; results go to $OUT (default ./gpu-out)
#
# What it needs beside the repo, in .whl/ (git-ignored, carried to the machine):
#   *.whl                 cp312 wheels of what the machine's Python lacks or has at other versions
#                         (transformers 5.23, trl 1.16, datasets 5.2, peft 0.21.2, bitsandbytes 0.50.2, ...);
#                         it keeps its own torch, accelerate, huggingface_hub and tokenizers
#   models/smollm2-135m-instruct/   config + tokenizer of SmolLM2-135M-Instruct (no weights)
#   models/qwen2.5-0.5b/            config + tokenizer (tokenizer.json.gz) of Qwen2.5-0.5B (no weights)
#   data/ed_ekman_dev.csv           the ED dev file the rows are built from (../shared does not travel)
# The bases are random-initialised from those configs (--random-init): speed and memory are exact, losses
# mean nothing. resolve_model wants a weights file in a model folder, so an empty placeholder
# model.safetensors is put beside each copied config; --random-init reads only config and tokenizer.
#
# Environment: OUT (results), WHL (default .whl), BUDGET_S (seconds this script may take in all, default
# 450: the Qwen part runs only in what is left, under `timeout`), QWEN_VARIANTS (default the three of the
# 2026-11-23 table), SMOLLM_VARIANTS (all five), EXAMPLES (2048), BATCH (16), SKIP_QWEN=1.
set -euo pipefail
OUT=${OUT:-$PWD/gpu-out}
WHL=${WHL:-.whl}
BUDGET_S=${BUDGET_S:-450}
EXAMPLES=${EXAMPLES:-2048}
BATCH=${BATCH:-16}
QWEN_VARIANTS=${QWEN_VARIANTS:-lora_bf16,lora_bf16_completion_head,qlora_nf4}
SMOLLM_VARIANTS=${SMOLLM_VARIANTS:-lora_fp32,lora_bf16,lora_bf16_fp32_weights,lora_bf16_completion_head,qlora_nf4}
mkdir -p "$OUT"
LOG=$OUT/log.txt

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# nothing outside the machine can be reached: never wait on the hub
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TQDM_DISABLE=1 HF_DATASETS_DISABLE_PROGRESS_BARS=1 # keep the log to the results

{
    echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    nvidia-smi -L
    python3 - <<'EOF'
import sys, importlib
print("python", sys.version.split()[0])
for name in ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "bitsandbytes", "huggingface_hub", "tokenizers"):
    mod = importlib.import_module(name)
    print(name, mod.__version__, mod.__file__.rsplit("/", 2)[0])
import torch
print("cuda", torch.version.cuda, torch.cuda.get_device_name())
EOF
    python3 -c 'import train.sft, trl, peft, datasets, bitsandbytes'
    echo "== imports ok"
} 2>&1 | tee "$LOG"

# Model folders: config + tokenizer + placeholder weights file (see above).
MODELS=/tmp/gpu-models
rm -rf "$MODELS" && mkdir -p "$MODELS/cache"
cp -r "$WHL/models/smollm2-135m-instruct" "$MODELS/cache/"
: >"$MODELS/cache/smollm2-135m-instruct/model.safetensors"
export TRACE_DISTILL_CACHE=$MODELS/cache # the smollm2-135m alias resolves here, no GGUF conversion
if [ -d "$WHL/models/qwen2.5-0.5b" ]; then
    cp -r "$WHL/models/qwen2.5-0.5b" "$MODELS/"
    gunzip -f "$MODELS/qwen2.5-0.5b/tokenizer.json.gz"
    : >"$MODELS/qwen2.5-0.5b/model.safetensors"
fi
DATA=$WHL/data/ed_ekman_dev.csv
[ -f "$DATA" ] || DATA=data_prep/sample/ed_sample.csv # gpu_train.py falls back to the sample too

echo "== SmolLM2-135M shape, all variants ($(date -u +%T))" | tee -a "$LOG"
python3 benchmarks/gpu_train.py --model smollm2-135m --random-init --examples "$EXAMPLES" --batch-size "$BATCH" \
    --data "$DATA" --variants "$SMOLLM_VARIANTS" --out "$OUT/gpu_train_smollm2.json" 2>&1 | tee -a "$LOG"
echo "== SmolLM2 done at ${SECONDS}s" | tee -a "$LOG"

LEFT=$((BUDGET_S - SECONDS))
if [ "${SKIP_QWEN:-0}" = 1 ] || [ ! -d "$MODELS/qwen2.5-0.5b" ]; then
    echo "== Qwen2.5-0.5B skipped (SKIP_QWEN or no model folder)" | tee -a "$LOG"
elif [ "$LEFT" -lt 100 ]; then
    echo "== Qwen2.5-0.5B skipped: ${LEFT}s left of BUDGET_S=$BUDGET_S" | tee -a "$LOG"
else
    echo "== Qwen2.5-0.5B shape, $QWEN_VARIANTS, under timeout $((LEFT - 10))s" | tee -a "$LOG"
    # a variant's line is printed as it finishes, so a run cut short still leaves those in the log
    timeout -k 5 $((LEFT - 10)) python3 benchmarks/gpu_train.py --model "$MODELS/qwen2.5-0.5b" --random-init \
        --examples "$EXAMPLES" --batch-size "$BATCH" --data "$DATA" --variants "$QWEN_VARIANTS" \
        --out "$OUT/gpu_train_qwen0.5b.json" >"$OUT/log_qwen.txt" 2>&1 \
        || echo "== Qwen run ended with rc=$? (124: cut by the budget)" | tee -a "$LOG"
    grep -E '^(lora|qlora)_[a-z0-9_]+: \{' "$OUT/log_qwen.txt" | tee -a "$LOG" || true
fi
echo "== done at ${SECONDS}s" | tee -a "$LOG"

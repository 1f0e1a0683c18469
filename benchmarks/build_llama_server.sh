#!/usr/bin/env bash
# llama.cpp's `llama-server` and `llama-quantize` for benchmarks/peers.py, built once from PyPI (GitHub and
# the hub need not be reachable): the llama-cpp-python sdist vendors llama.cpp's source, and only these two
# CMake targets are built (static, native CPU flags, no web UI, no curl/OpenSSL). The Python package itself is
# not built or installed. Idempotent: a finished build is only reported. Prints the build time; writes it,
# the versions and the CPU flags to $PREFIX/build-info.txt.
# Usage: bash benchmarks/build_llama_server.sh [PREFIX=/work/llamacpp]
#   JOBS=1 (parallel compile jobs; 1 with `nice -n 19` leaves a shared machine's other work its cores)
#   PYTHON=python (its pip downloads the sdist), LLAMA_CPP_PYTHON_VERSION=0.3.36 (vendors llama.cpp@0c1e57098)
# Afterwards: $PREFIX/bin/llama-server, $PREFIX/bin/llama-quantize, $PREFIX/llama.cpp (the source: the GGUF
# converter convert_hf_to_gguf.py and its gguf-py).
set -euo pipefail
PREFIX=$(realpath -m "${1:-/work/llamacpp}")
JOBS=${JOBS:-1}
PYTHON=${PYTHON:-python}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
SRC="$PREFIX/src/llama_cpp_python-$VERSION/vendor/llama.cpp"
BUILD="$PREFIX/build"
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }

if [[ -x "$PREFIX/bin/llama-server" && -x "$PREFIX/bin/llama-quantize" && -f "$PREFIX/build-info.txt" ]]; then
  stamp "already built: $PREFIX/bin/llama-server"
  cat "$PREFIX/build-info.txt"
  exit 0
fi

mkdir -p "$PREFIX/src" "$PREFIX/bin"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
  stamp "downloading the llama-cpp-python $VERSION sdist from PyPI"
  "$PYTHON" -m pip download "llama-cpp-python==$VERSION" --no-deps --no-binary :all: -d "$PREFIX/src"
  tar -xzf "$PREFIX/src/llama_cpp_python-$VERSION.tar.gz" -C "$PREFIX/src"
fi
ln -sfn "$SRC" "$PREFIX/llama.cpp"

started=$(date +%s)
stamp "configuring $SRC"
# LLAMA_USE_PREBUILT_UI=OFF: the web UI's assets would be downloaded from the hub; the server runs without them.
nice -n 19 cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
  > "$PREFIX/cmake-configure.log" 2>&1
stamp "building llama-server and llama-quantize with $JOBS job(s) at nice 19 (log: $PREFIX/cmake-build.log)"
nice -n 19 cmake --build "$BUILD" --config Release --target llama-server llama-quantize -j "$JOBS" \
  > "$PREFIX/cmake-build.log" 2>&1
cp "$BUILD/bin/llama-server" "$BUILD/bin/llama-quantize" "$PREFIX/bin/"
seconds=$(($(date +%s) - started))

{
  echo "llama-server: $PREFIX/bin/llama-server"
  echo "source: llama-cpp-python $VERSION sdist (PyPI), vendored llama.cpp; its CHANGELOG's first entry:"
  grep -m1 -o "ggml-org/llama.cpp@[0-9a-f]*" "$PREFIX/src/llama_cpp_python-$VERSION/CHANGELOG.md" || true
  echo "version: $("$PREFIX/bin/llama-server" --version 2>&1 | tr '\n' ' ')"
  echo "compiler: $(c++ --version | head -1); cmake $(cmake --version | head -1 | awk '{print $3}')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs); nproc $(nproc)"
  echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_bf16|amx_bf16)$' | xargs)"
  echo "build: ${seconds} s with $JOBS job(s) at nice 19, $(date -u +%Y-%m-%dT%H:%MZ)"
} > "$PREFIX/build-info.txt"
stamp "built in ${seconds} s"
cat "$PREFIX/build-info.txt"

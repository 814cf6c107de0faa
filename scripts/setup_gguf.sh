#!/usr/bin/env bash
# llama.cpp for `export --format gguf` and its check, into ./.venv (idempotent: a second run is fast).
#  1. llama.cpp's converter (convert_hf_to_gguf.py, conversion/, gguf-py/, models/templates/, LICENSE,
#     and Qwen2's vocabulary GGUF, which the tests' tiny Qwen2 model takes its real tokenizer from),
#     extracted from the llama-cpp-python sdist into .venv/share/local-grpo/llama.cpp, where
#     local_grpo/llamacpp.py finds it;
#  2. the `gguf` extra: llama-cpp-python (llama.cpp's runtime and quantizer), compiled from the same sdist.
#     This compiles llama.cpp: minutes (about 5 on 2 cores). CMAKE_BUILD_PARALLEL_LEVEL sets the jobs.
#     On x86-64 it is compiled without ggml's AMX kernels: on CPUs with AMX they crash llama.cpp
#     (SIGSEGV in ggml_backend_amx_mul_mat on q8_0 and k-quant files, ggml-org/llama.cpp#20824).
# The version is the one pinned by the gguf extra in pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
version="$(sed -n 's/.*"llama-cpp-python==\([0-9.]*\)".*/\1/p' pyproject.toml | head -n 1)"
if [ -z "$version" ]; then
  echo "setup_gguf: pyproject.toml pins no llama-cpp-python==VERSION in its gguf extra" >&2
  exit 1
fi
dest=.venv/share/local-grpo/llama.cpp
installed="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || true)"
extracted="$(cat "$dest/VERSION" 2>/dev/null || true)"
if [ "$installed" = "$version" ] && [ "$extracted" = "$version" ]; then
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "setup_gguf: llama-cpp-python $version (sdist)"
.venv/bin/python -m pip download -q --no-deps --no-binary :all: -d "$work/sdist" "llama-cpp-python==$version"
sdist="$(ls "$work"/sdist/llama_cpp_python-"$version".tar.gz)"

if [ "$extracted" != "$version" ]; then
  top="llama_cpp_python-$version/vendor/llama.cpp"
  tar -xzf "$sdist" -C "$work" "$top/convert_hf_to_gguf.py" "$top/conversion" "$top/gguf-py" "$top/models/templates" \
    "$top/models/ggml-vocab-qwen2.gguf" \
    "$top/LICENSE"
  echo "$version" > "$work/$top/VERSION"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest.new"
  mv "$work/$top" "$dest.new"
  rm -rf "$dest"
  mv "$dest.new" "$dest"
  echo "setup_gguf: llama.cpp's converter in $dest"
fi

if [ "$installed" != "$version" ]; then
  echo "setup_gguf: compiling llama-cpp-python $version (minutes)"
  start=$(date +%s)
  if [ "$(uname -m)" = x86_64 ]; then
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    export CFLAGS="${CFLAGS:-} $no_amx" CXXFLAGS="${CXXFLAGS:-} $no_amx"
  fi
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    .venv/bin/python -m pip install -q --no-cache-dir --find-links "$work/sdist" -e ".[gguf]"
  echo "setup_gguf: llama-cpp-python $version installed in $(( $(date +%s) - start )) s"
fi

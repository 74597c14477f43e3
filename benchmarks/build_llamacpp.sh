#!/usr/bin/env bash
# Builds llama.cpp's own C++ server (and llama-bench, llama-quantize, llama-perplexity) into
# DEST/bin from the source the llama-cpp-python sdist vendors, for the CPU this runs on.
# A build whose first tokens crash (ggml's AMX backend does on some hosts) is rebuilt without
# AMX, and says so in DEST/build-flags.txt.
# usage: build_llamacpp.sh DEST VERSION PYTHON GGUF
set -euo pipefail
dest=$1 version=$2 python=$3 gguf=$4
mkdir -p "$dest/src" "$dest/bin"
dest=$(cd "$dest" && pwd)
sdist="$dest/src/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
    "$python" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$version" \
        -d "$dest/src"
fi
src="$dest/src/llama_cpp_python-$version/vendor/llama.cpp"
[ -d "$src" ] || tar -xzf "$sdist" -C "$dest/src"
jobs=$(nproc)
targets=(llama-server llama-bench llama-quantize llama-perplexity)

build() {  # build DIR EXTRA_C_FLAGS
    cmake -S "$src" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DBUILD_SHARED_LIBS=OFF -DCMAKE_C_FLAGS="$2" -DCMAKE_CXX_FLAGS="$2" >/dev/null
    cmake --build "$1" -j "$jobs" --target "${targets[@]}"
}

smoke() {  # a few tokens of the default model: does this build run on this host?
    "$1/bin/llama-bench" -m "$gguf" -p 16 -n 4 -r 1 -t "$jobs" >/dev/null 2>&1
}

flags="" out="$dest/build"
build "$out" "$flags"
if ! smoke "$out"; then
    echo "build_llamacpp: the native build crashed on its first tokens; rebuilding without AMX"
    flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" out="$dest/build-noamx"
    build "$out" "$flags"
    smoke "$out" || { echo "build_llamacpp: the build without AMX fails too"; exit 1; }
fi
for t in "${targets[@]}"; do cp "$out/bin/$t" "$dest/bin/$t"; done
echo "GGML_NATIVE=ON ${flags:-(no extra flags)}" > "$dest/build-flags.txt"
echo "build_llamacpp: $dest/bin/llama-server ($(cat "$dest/build-flags.txt"))"

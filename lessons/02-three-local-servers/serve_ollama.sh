#!/usr/bin/env bash
# ─────────────────────────────────────────────────────────────────────────────
# Lesson 02 · Ollama, in the foreground, on 127.0.0.1:11434.
#
#   bash serve_ollama.sh [MODEL] [CTX] [PARALLEL]      defaults: llama3.1:8b 8192 4
#
# Ollama wraps llama.cpp. Unlike llama-server's -c, its context length is per
# seat: 8192 4 gives each of 4 seats 8,192 tokens (and reserves 4 x 8,192 of KV
# cache). MODEL is an Ollama name; llama3.1:8b is Llama 3.1 8B Instruct at
# Q4_K_M, 4.9 GB, the same model as serve_llamacpp.sh. It is pulled once.
#
# Environment:
#   OLLAMA_PORT=11434      the port
#   OLLAMA_BIN=ollama      the binary
#
# If Ollama already runs (the macOS app starts it at login), this script only
# pulls the model: that server keeps its own settings. Quit the app to use these.
# --dry-run prints the commands instead of running them. Ctrl+C stops the server.
# ─────────────────────────────────────────────────────────────────────────────
set -euo pipefail

usage() { sed -n '3,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
show() { local line; line="$(printf '%q ' "$@")"; echo "${line% }"; }   # a command, quoted

DRY_RUN=0
POSITIONAL=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    -*) echo "serve_ollama.sh: unknown option $arg (try --help)" >&2; exit 2 ;;
    *) POSITIONAL+=("$arg") ;;
  esac
done
MODEL="${POSITIONAL[0]:-llama3.1:8b}"
CTX="${POSITIONAL[1]:-8192}"
PARALLEL="${POSITIONAL[2]:-4}"
PORT="${OLLAMA_PORT:-11434}"
for n in "$CTX" "$PARALLEL" "$PORT"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "serve_ollama.sh: '$n' is not a whole number (usage: [MODEL] [CTX] [PARALLEL])" >&2; exit 2; }
done

OLLAMA="${OLLAMA_BIN:-ollama}"
if ! command -v "$OLLAMA" >/dev/null 2>&1; then
  cat >&2 <<EOF
ollama was not found. Get it one of these ways:
  macOS:                   brew install ollama   (or the app from ollama.com)
  Linux with Homebrew:     brew install ollama
  Linux without Homebrew:  the install script or the release archive from ollama.com
Or point OLLAMA_BIN at a binary you already have.
EOF
  exit 127
fi

export OLLAMA_HOST="127.0.0.1:$PORT"
SERVE_ENV=(OLLAMA_HOST="$OLLAMA_HOST" OLLAMA_CONTEXT_LENGTH="$CTX" OLLAMA_NUM_PARALLEL="$PARALLEL")
echo "ollama: $MODEL, $PARALLEL seats of $CTX tokens each"
if [[ "$DRY_RUN" == 1 ]]; then
  show env "${SERVE_ENV[@]}" "$OLLAMA" serve
  show env OLLAMA_HOST="$OLLAMA_HOST" "$OLLAMA" pull "$MODEL"
  exit 0
fi

health() {
  python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
    "http://127.0.0.1:$PORT/api/version" 2>/dev/null
}
ready() {
  "$OLLAMA" pull "$MODEL"
  echo "ollama is listening on http://127.0.0.1:$PORT/v1 (model: $MODEL). $1"
}

if health; then
  echo "serve_ollama.sh: Ollama already runs on port $PORT; it keeps its own context and seat settings."
  ready "It was already running: stop it from its menu or with the command that started it."
  exit 0
fi

env "${SERVE_ENV[@]}" "$OLLAMA" serve &
PID=$!
trap 'kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true' EXIT   # never leave the server behind
trap 'exit 130' INT TERM
until health; do
  if ! kill -0 "$PID" 2>/dev/null; then
    wait "$PID" && rc=0 || rc=$?
    echo "serve_ollama.sh: ollama serve stopped before it was ready (exit $rc); see its log above." >&2
    [[ "$rc" == 0 ]] && rc=1
    exit "$rc"
  fi
  sleep 0.5
done
ready "Ctrl+C stops it."
wait "$PID"

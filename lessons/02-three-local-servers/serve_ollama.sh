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
HELP_LINES=3,18   # the header above: what --help prints
# shellcheck source-path=SCRIPTDIR source=_serve_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/_serve_common.sh"   # parse_args, show, start_server, ...

# ── check the arguments, before anything starts ──────────────────────────────
parse_args "$@"
USAGE="bash $SCRIPT_NAME [MODEL] [CTX] [PARALLEL], for example llama3.1:8b 8192 4"
need_at_most 3 "$USAGE"
MODEL="${POSITIONAL[0]:-llama3.1:8b}"
CTX="${POSITIONAL[1]:-8192}"
PARALLEL="${POSITIONAL[2]:-4}"
PORT="${OLLAMA_PORT:-11434}"
need_a_name "$MODEL" "the model" llama3.1:8b "$USAGE"
need_whole_numbers "[MODEL] [CTX] [PARALLEL]" "$CTX" "$PARALLEL" "$PORT"
need_seats_of_at_least 256 "$CTX" "CTX $CTX (Ollama's is per seat)"

OLLAMA="${OLLAMA_BIN:-ollama}"
if ! command -v "$OLLAMA" >/dev/null 2>&1; then
  missing_engine <<EOF
ollama was not found. Get it one of these ways:
  macOS:                   brew install ollama   (or the app from ollama.com)
  Linux with Homebrew:     brew install ollama
  Linux without Homebrew:  the install script or the release archive from ollama.com
Or point OLLAMA_BIN at a binary you already have.
EOF
fi

export OLLAMA_HOST="127.0.0.1:$PORT"
SERVE_ENV=(OLLAMA_HOST="$OLLAMA_HOST" OLLAMA_CONTEXT_LENGTH="$CTX" OLLAMA_NUM_PARALLEL="$PARALLEL")
echo "ollama: $MODEL, $PARALLEL seats of $CTX tokens each"
if [[ "$DRY_RUN" == 1 ]]; then
  show env "${SERVE_ENV[@]}" "$OLLAMA" serve
  show env OLLAMA_HOST="$OLLAMA_HOST" "$OLLAMA" pull "$MODEL"
  exit 0
fi

HEALTH_URL="http://127.0.0.1:$PORT/api/version"
ready() {
  "$OLLAMA" pull "$MODEL"
  echo "ollama is listening on http://127.0.0.1:$PORT/v1 (model: $MODEL). $1"
}

if answers "$HEALTH_URL"; then
  echo "serve_ollama.sh: Ollama already runs on port $PORT; it keeps its own context and seat settings."
  ready "It was already running: stop it from its menu or with the command that started it."
  exit 0
fi

start_server env "${SERVE_ENV[@]}" "$OLLAMA" serve
wait_until_healthy "$HEALTH_URL" "ollama serve"
ready "Ctrl+C stops it."
wait "$SERVER_PID"

#!/usr/bin/env bash
# ─────────────────────────────────────────────────────────────────────────────
# Lesson 02 · llama.cpp's llama-server, in the foreground, on 127.0.0.1:8080.
#
#   bash serve_llamacpp.sh [QUANT] [CTX] [PARALLEL]      defaults: Q4_K_M 8192 4
#
# CTX is the KV cache size in tokens, shared by PARALLEL seats (slots). The seats
# split it evenly: 8192 / 4 = 2,048 tokens each, too few for lesson 06's
# 3,000-token opening. That is the lesson's trap; `Q4_K_M 16384 4` gives 4,096 each.
#
# Environment:
#   LLAMACPP_MODEL=/path/file.gguf   a local file instead of downloading (QUANT is then ignored)
#   LLAMACPP_HF_REPO=user/repo       the repo to download from
#                                    (default bartowski/Meta-Llama-3.1-8B-Instruct-GGUF)
#   LLAMACPP_PORT=8080               the port
#   LLAMA_SERVER=/path/llama-server  the binary (default: on PATH, else <kit>/.tools/bin)
#   LLAMACPP_ARGS="..."              extra flags, appended as they are
#
# --dry-run prints the command instead of running it. Ctrl+C stops the server.
# ─────────────────────────────────────────────────────────────────────────────
set -euo pipefail
HELP_LINES=3,19   # the header above: what --help prints
# shellcheck source-path=SCRIPTDIR source=_serve_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/_serve_common.sh"   # parse_args, show, start_server, ...

DEFAULT_REPO="bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"   # Llama 3.1 8B Instruct; Q4_K_M is 4.9 GB

# ── check the arguments, before anything starts ──────────────────────────────
parse_args "$@"
USAGE="bash $SCRIPT_NAME [QUANT] [CTX] [PARALLEL], for example Q4_K_M 16384 4"
need_at_most 3 "$USAGE"
QUANT="${POSITIONAL[0]:-Q4_K_M}"
CTX="${POSITIONAL[1]:-8192}"
PARALLEL="${POSITIONAL[2]:-4}"
PORT="${LLAMACPP_PORT:-8080}"
need_a_name "$QUANT" "the quantisation" Q4_K_M "$USAGE"
need_whole_numbers "[QUANT] [CTX] [PARALLEL]" "$CTX" "$PARALLEL" "$PORT"
need_seats_of_at_least 256 $((CTX / PARALLEL)) "CTX $CTX shared by $PARALLEL seats"

# ── find the binary ──────────────────────────────────────────────────────────
SERVER="${LLAMA_SERVER:-}"
if [[ -z "$SERVER" ]]; then
  if command -v llama-server >/dev/null 2>&1; then SERVER="$(command -v llama-server)"
  elif [[ -x "$KIT_ROOT/.tools/bin/llama-server" ]]; then SERVER="$KIT_ROOT/.tools/bin/llama-server"
  fi
fi
if [[ ( -z "$SERVER" || ! -x "$SERVER" ) && "$DRY_RUN" == 1 ]]; then
  # --dry-run only shows the command: without the binary it shows the one it would run once
  # llama-server is installed (on PATH), and says so.
  echo "(llama-server is not installed yet: this is the command once it is on PATH)" >&2
  SERVER="llama-server"
elif [[ -z "$SERVER" || ! -x "$SERVER" ]]; then
  missing_engine <<EOF
llama-server was not found${LLAMA_SERVER:+ at LLAMA_SERVER=$LLAMA_SERVER}. Get it one of these ways:
  macOS or Linux with Homebrew:   brew install llama.cpp
  Ubuntu 25.10+, Debian testing:  sudo apt install llama.cpp   (Debian 12 has no package)
  anything else, from source:     $(kit_make llama-server)   (6 to 20 minutes on 2 cores,
                                  installs .tools/bin/llama-server, no Homebrew needed)
Or point LLAMA_SERVER at a binary you already have.
EOF
fi

# ── build the command ────────────────────────────────────────────────────────
STOP_HINT=""   # said if llama-server stops before it is ready
if [[ -n "${LLAMACPP_MODEL:-}" ]]; then
  [[ -f "$LLAMACPP_MODEL" ]] || fail 2 "LLAMACPP_MODEL=$LLAMACPP_MODEL is not a file"
  MODEL_ARGS=(-m "$LLAMACPP_MODEL")
  MODEL_NAME="$LLAMACPP_MODEL"
else
  MODEL_ARGS=(-hf "${LLAMACPP_HF_REPO:-$DEFAULT_REPO}:$QUANT")
  MODEL_NAME="${LLAMACPP_HF_REPO:-$DEFAULT_REPO}:$QUANT (downloaded once, then cached)"
  STOP_HINT="If it could not download the model, check the network, or use a local file:"
  STOP_HINT+=" LLAMACPP_MODEL=/path/file.gguf bash $0 ..."
fi

# An explicit -np splits CTX into PARALLEL equal seats. Recent builds would share one
# unified KV cache only when -np is automatic; say --no-kv-unified out loud where the
# build knows the flag, so every seat really holds CTX / PARALLEL tokens.
SEAT_ARGS=(-c "$CTX" -np "$PARALLEL")
HELP="$("$SERVER" --help 2>&1 || true)"   # no binary (a dry run): no such flag is added
if [[ "$HELP" == *--no-kv-unified* ]]; then
  SEAT_ARGS+=(--no-kv-unified)
fi

# shellcheck disable=SC2206  # LLAMACPP_ARGS is split on spaces on purpose
CMD=("$SERVER" "${MODEL_ARGS[@]}" "${SEAT_ARGS[@]}" --host 127.0.0.1 --port "$PORT" --metrics ${LLAMACPP_ARGS:-})

echo "llama-server: $MODEL_NAME"
echo "  $CTX tokens of context over $PARALLEL seats = $((CTX / PARALLEL)) tokens per seat"
if [[ "$DRY_RUN" == 1 ]]; then
  show "${CMD[@]}"
  exit 0
fi

# ── run it, and say when it listens ──────────────────────────────────────────
PREFER_CURL=1   # ask /health with curl where it is installed (else python3)
HEALTH_URL="http://127.0.0.1:$PORT/health"
need_free_port "$PORT" LLAMACPP_PORT "$HEALTH_URL"
start_server "${CMD[@]}"
wait_until_healthy "$HEALTH_URL" llama-server "$STOP_HINT"
echo "llama-server is listening on http://127.0.0.1:$PORT/v1 ($PARALLEL seats of $((CTX / PARALLEL)) tokens). Ctrl+C stops it."
wait "$SERVER_PID"

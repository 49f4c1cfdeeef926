#!/usr/bin/env bash
# ─────────────────────────────────────────────────────────────────────────────
# Lesson 02 · MLX's mlx_lm.server, in the foreground, on 127.0.0.1:8081.
#
#   bash serve_mlx.sh
#
# The same model family as serve_llamacpp.sh (Llama 3.1 8B Instruct, 4-bit,
# about 4.5 GB), in MLX's format. Apple silicon runs it on the GPU; on Linux the
# CPU build (`pip install "mlx[cpu]" mlx-lm`) runs only small models at a usable
# speed. Then, from the kit: python lessons/06-prefix-caching/prefix_bench.py --target mlx
#
# Environment:
#   MLX_MODEL=repo-or-dir   the model (default mlx-community/Meta-Llama-3.1-8B-Instruct-4bit)
#   MLX_PORT=8081           the port
#   MLX_ARGS="..."          extra mlx_lm.server flags, appended as they are
#
# --dry-run prints the command instead of running it. Ctrl+C stops the server.
# ─────────────────────────────────────────────────────────────────────────────
set -euo pipefail
HELP_LINES=3,17   # the header above: what --help prints
# shellcheck source-path=SCRIPTDIR source=_serve_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/_serve_common.sh"   # parse_flags_only, show, start_server, ...

DEFAULT_MODEL="mlx-community/Meta-Llama-3.1-8B-Instruct-4bit"

parse_flags_only "the model comes from MLX_MODEL" "$@"
MODEL="${MLX_MODEL:-$DEFAULT_MODEL}"
PORT="${MLX_PORT:-8081}"

# The kit's own mlx_lm.server (its .venv has MLX on Apple silicon, and after `make engines` on
# Linux), whether that environment is active or not; else the one on PATH.
if [[ -x "$KIT_ROOT/.venv/bin/mlx_lm.server" ]]; then PATH="$KIT_ROOT/.venv/bin:$PATH"; fi
if ! command -v mlx_lm.server >/dev/null 2>&1; then
  missing_engine <<EOF
mlx_lm.server was not found: MLX is not installed in the kit's environment yet.
Install it with:  $(kit_make engines)      (MLX, its CPU build on Linux; once)
then run this script again.
EOF
fi

# mlx_lm.server's GET /v1/models scans the Hugging Face cache and fails if that
# folder does not exist yet (a fresh machine that only ever used a local model).
HUB_CACHE="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"
mkdir -p "$HUB_CACHE"
export HF_HUB_CACHE="$HUB_CACHE"

# shellcheck disable=SC2206  # MLX_ARGS is split on spaces on purpose
CMD=(mlx_lm.server --model "$MODEL" --host 127.0.0.1 --port "$PORT" ${MLX_ARGS:-})

echo "mlx_lm.server: $MODEL"
echo "  requests name it \"default_model\" (felab's mlx target does), or by this same path or repo"
if [[ "$DRY_RUN" == 1 ]]; then
  show "${CMD[@]}"
  exit 0
fi

HEALTH_URL="http://127.0.0.1:$PORT/health"
need_whole_numbers "MLX_PORT=8081 bash serve_mlx.sh" "$PORT"
need_free_port "$PORT" MLX_PORT "$HEALTH_URL"

# The server's output goes to this terminal and to a log that this script watches: when the
# model cannot be loaded, mlx_lm.server keeps answering 503 instead of exiting.
LOG="$(mktemp)"
start_server --log "$LOG" "${CMD[@]}"
polls=0
until answers "$HEALTH_URL"; do
  exit_if_server_stopped mlx_lm.server
  if grep -q "generation thread died" "$LOG"; then
    fail 1 "mlx_lm.server could not load $MODEL (its error is above). A hub repo is" \
      "downloaded on first use (about 4.5 GB for the default): check the network, or set MLX_MODEL" \
      "to a local folder."
  fi
  # every half second at first, then every 5 s (each check is a line in the server's log)
  polls=$((polls + 1))
  if ((polls < 20)); then sleep 0.5; else sleep 5; fi
done
echo "mlx_lm.server is listening on http://127.0.0.1:$PORT/v1 (model: default_model = $MODEL). Ctrl+C stops it."
wait "$SERVER_PID"

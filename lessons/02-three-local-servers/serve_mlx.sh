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

DEFAULT_MODEL="mlx-community/Meta-Llama-3.1-8B-Instruct-4bit"

usage() { sed -n '3,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
show() { local line; line="$(printf '%q ' "$@")"; echo "${line% }"; }   # a command, quoted

DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    *) echo "serve_mlx.sh: unknown argument $arg (try --help; the model comes from MLX_MODEL)" >&2; exit 2 ;;
  esac
done
MODEL="${MLX_MODEL:-$DEFAULT_MODEL}"
PORT="${MLX_PORT:-8081}"

if ! command -v mlx_lm.server >/dev/null 2>&1; then
  cat >&2 <<EOF
mlx_lm.server was not found. Activate the kit's Python environment first
(from the kit folder: source .venv/bin/activate), then install MLX if needed:
  Apple silicon:  pip install mlx-lm
  Linux (CPU):    pip install "mlx[cpu]" mlx-lm      (or: make engines)
EOF
  exit 127
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

health() {
  python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
    "http://127.0.0.1:$PORT/health" 2>/dev/null
}
if health; then
  echo "serve_mlx.sh: something already answers on port $PORT. Stop it first, or set MLX_PORT." >&2
  exit 1
fi

# The server's output goes to this terminal and to a log that this script watches: when the
# model cannot be loaded, mlx_lm.server keeps answering 503 instead of exiting.
LOG="$(mktemp)"
"${CMD[@]}" > >(tee -a "$LOG") 2>&1 &
PID=$!
trap 'kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true; rm -f "$LOG"; true' EXIT   # never leave the server behind
trap 'exit 130' INT TERM
polls=0
until health; do
  if ! kill -0 "$PID" 2>/dev/null; then
    wait "$PID" && rc=0 || rc=$?
    echo "serve_mlx.sh: mlx_lm.server stopped before it was ready (exit $rc); see its log above." >&2
    [[ "$rc" == 0 ]] && rc=1
    exit "$rc"
  fi
  if grep -q "generation thread died" "$LOG"; then
    echo "serve_mlx.sh: mlx_lm.server could not load $MODEL (its error is above). A hub repo is" \
      "downloaded on first use (about 4.5 GB for the default): check the network, or set MLX_MODEL" \
      "to a local folder." >&2
    exit 1
  fi
  # every half second at first, then every 5 s (each check is a line in the server's log)
  polls=$((polls + 1))
  if ((polls < 20)); then sleep 0.5; else sleep 5; fi
done
echo "mlx_lm.server is listening on http://127.0.0.1:$PORT/v1 (model: default_model = $MODEL). Ctrl+C stops it."
wait "$PID"

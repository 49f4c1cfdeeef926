#!/usr/bin/env bash
# ─────────────────────────────────────────────────────────────────────────────
# Lesson 06 · the prefix cache by hand, with MLX.
#
#   bash mlx_prompt_cache.sh
#
# A server's prefix cache keeps the KV cache of an opening it has read and starts
# the next request where that opening ends. Here you do it yourself, in three steps,
# on the same opening (PREAMBLE) that prefix_bench.py sends:
#   1. cold:   mlx_lm.generate reads the opening and the question (~3,000 tokens)
#   2. save:   mlx_lm.cache_prompt reads the opening once and writes its KV cache to a file
#   3. warm:   mlx_lm.generate loads that file and reads only the question
# Compare the `Prompt: N tokens` line of steps 1 and 3.
#
# Environment:
#   MLX_MODEL=repo-or-dir   the model (default mlx-community/Meta-Llama-3.1-8B-Instruct-4bit,
#                           about 4.5 GB, downloaded on first use)
#   MLX_MAX_TOKENS=40       how many tokens each answer may have
# ─────────────────────────────────────────────────────────────────────────────
set -euo pipefail

usage() { sed -n '3,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) echo "mlx_prompt_cache.sh: takes no arguments (try --help; the model comes from MLX_MODEL)" >&2; exit 2 ;;
esac

# Physical paths (cd -P, pwd -P) throughout: this folder is also reached through 03-labs/lessons,
# a link, and a logical `..` from there would land in 03-labs/, not in the kit.
MODEL="${MLX_MODEL:-mlx-community/Meta-Llama-3.1-8B-Instruct-4bit}"
[[ -d "$MODEL" ]] && MODEL="$(cd -P "$MODEL" && pwd -P)"   # a local folder, named from where you are
CALLER="$(pwd -P)"                                          # the folder you ran this from
cd -P "$(dirname "${BASH_SOURCE[0]}")"
KIT="$(cd -P ../.. && pwd -P)"
MAX_TOKENS="${MLX_MAX_TOKENS:-40}"
QUESTION="Question: How do I rotate my API key?"

# from_here PATH: PATH as seen from the folder you ran this from, so advice can be pasted there.
from_here() { python3 -c 'import os, sys; print(os.path.relpath(*sys.argv[1:]))' "$1" "$CALLER" 2>/dev/null || echo "$1"; }
if [[ "$CALLER" == "$KIT" || "$CALLER" == "$KIT/03-labs" ]]; then MAKE_KIT="make"
else MAKE_KIT="make -C $(from_here "$KIT")"
fi
AGAIN="bash $(from_here "$PWD/mlx_prompt_cache.sh")"

# MLX's commands: the kit's own (its .venv has MLX on Apple silicon, and after `make engines`
# on Linux), whether that environment is active or not; else the ones on PATH.
if [[ -x "$KIT/.venv/bin/mlx_lm.generate" ]]; then PATH="$KIT/.venv/bin:$PATH"; fi
for tool in mlx_lm.generate mlx_lm.cache_prompt; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    cat >&2 <<EOF
$tool: command not found. MLX is not installed in the kit's environment yet.
Install it with:  $MAKE_KIT engines      (MLX, its CPU build on Linux; once)
then run this script again:  $AGAIN
EOF
    exit 127
  fi
done

# A hub model is downloaded on first use. Offline, and not downloaded before, mlx_lm would stop
# with a traceback: say so first, and name the kit's tiny model, which needs no network.
in_hub_cache() {
  local hub="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"
  compgen -G "$hub/models--${1//\//--}/snapshots/*/config.json" >/dev/null
}
hub_answers() {   # any HTTP answer counts (a gated repo answers 401): only no answer at all is offline
  [[ "${HF_HUB_OFFLINE:-0}" != 1 ]] && python3 -c 'import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1], method="HEAD"), timeout=5)
except urllib.error.HTTPError:
    pass' "${HF_ENDPOINT:-https://huggingface.co}/api/models/$1" 2>/dev/null
}
if [[ ! -d "$MODEL" ]] && ! in_hub_cache "$MODEL" && ! hub_answers "$MODEL"; then
  TINY="$KIT/.tools/tiny-model/hf"
  MAKE_TINY=""
  [[ -f "$TINY/config.json" ]] || MAKE_TINY="Write it with:  $MAKE_KIT tiny-model      (once, seconds, offline)
then run:  "
  WHY="${HF_ENDPOINT:-https://huggingface.co} does not answer (no network?)"
  [[ "${HF_HUB_OFFLINE:-0}" == 1 ]] && WHY="HF_HUB_OFFLINE=1 forbids downloading it"
  cat >&2 <<EOF
mlx_prompt_cache.sh: cannot get the model $MODEL: it is not downloaded yet and
$WHY.
Offline, use the kit's tiny model: random weights, so its answers are gibberish, but its
Prompt: lines show the same thing (the whole opening read in step 1, only the question in step 3).
${MAKE_TINY}MLX_MODEL=$(from_here "$TINY") $AGAIN
Or, with a network, run this again to download $MODEL once.
EOF
  exit 1
fi

# The very same opening prefix_bench.py sends (no trailing newline, so steps 1 and 2 match),
# written by the kit's Python (the active one may be another environment's), whole or not at all.
KIT_PYTHON="$KIT/.venv/bin/python"
[[ -x "$KIT_PYTHON" ]] || KIT_PYTHON=python3
if ! "$KIT_PYTHON" -c "import sys; from prefix_bench import PREAMBLE; sys.stdout.write(PREAMBLE)" \
    > preamble.txt.part 2>/dev/null; then
  rm -f preamble.txt.part
  cat >&2 <<EOF
mlx_prompt_cache.sh: could not write the opening: the kit's environment (.venv in the kit folder)
does not exist yet, and $(command -v python3 || echo python3) does not have the kit.
Create it with:  $MAKE_KIT setup      (once, about a minute)
then run this script again:  $AGAIN
EOF
  exit 1
fi
mv preamble.txt.part preamble.txt
echo "model: $MODEL"
echo "opening: preamble.txt, $(wc -c < preamble.txt | tr -d ' ') characters (about $(( $(wc -c < preamble.txt) / 4 )) tokens by chars/4)"

echo
echo "▸ 1. cold: read the whole opening and the question (watch 'Prompt: … tokens')"
time mlx_lm.generate --model "$MODEL" --max-tokens "$MAX_TOKENS" \
  --prompt "$(cat preamble.txt) $QUESTION"

echo
echo "▸ 2. read the opening once and save its KV cache to preamble.safetensors"
time mlx_lm.cache_prompt --model "$MODEL" --prompt "$(cat preamble.txt)" \
  --prompt-cache-file preamble.safetensors

echo
echo "▸ 3. warm: load the saved cache, read only the question"
time mlx_lm.generate --model "$MODEL" --prompt-cache-file preamble.safetensors \
  --max-tokens "$MAX_TOKENS" --prompt " $QUESTION"

echo
echo "Step 1's Prompt: line counts the opening and the question; step 3's only the question."

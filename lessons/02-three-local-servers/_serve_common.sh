# shellcheck shell=bash
# ─────────────────────────────────────────────────────────────────────────────
# Lesson 02 · what the three serve_*.sh scripts share: their arguments, their
# checks, and running a server in the foreground until it answers.
#
# Each script sources this file after `set -euo pipefail`; it is not run on its
# own. It stays bash 3.2-compatible (macOS's bash).
#
# A script sets, before it calls these:  HELP_LINES (the lines --help prints),
#                                        PREFER_CURL=1 (optional, see answers)
# These set, for the script:  DRY_RUN and POSITIONAL (parse_args, parse_flags_only),
#                             SERVER_PID (start_server)
# ─────────────────────────────────────────────────────────────────────────────

SCRIPT="${BASH_SOURCE[1]:-$0}"   # the serve_*.sh that sources this file
SCRIPT_NAME="${SCRIPT##*/}"      # its name, which starts its messages
# Physical paths (cd -P, pwd -P): the lessons are also reached through 03-labs/lessons, a link,
# and a logical `..` from there would land in 03-labs/, not in the kit.
KIT_ROOT="$(cd -P "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"

# kit_make TARGET: `make TARGET` as typed in the folder you ran the script from (advice to paste).
# `make -C` changes folder physically, so the path is worked out from the physical folder.
kit_make() {
  local here rel
  here="$(pwd -P)"
  if [[ "$here" == "$KIT_ROOT" || "$here" == "$KIT_ROOT/03-labs" ]]; then echo "make $1"; return; fi
  rel="$(python3 -c 'import os, sys; print(os.path.relpath(*sys.argv[1:]))' "$KIT_ROOT" "$here" 2>/dev/null)" \
    || rel="$KIT_ROOT"
  echo "make -C $rel $1"
}

# usage: print the script's header comment (its HELP_LINES), without the leading "# ".
usage() { sed -n "${HELP_LINES}p" "$SCRIPT" | sed 's/^# \{0,1\}//'; }

# show CMD...: print a command, quoted so that it can be pasted into a shell.
show() { local line; line="$(printf '%q ' "$@")"; echo "${line% }"; }

# fail CODE MESSAGE...: print "<script>: MESSAGE" on stderr and exit with CODE.
fail() { local code="$1"; shift; echo "$SCRIPT_NAME: $*" >&2; exit "$code"; }

# parse_args ARG...: --help prints the usage and exits 0, --dry-run sets DRY_RUN=1,
# any other option exits 2, and the other words go to the array POSITIONAL.
parse_args() { _parse_args "" "$@"; }

# parse_flags_only HINT ARG...: the same for a script that takes no words; any other
# argument exits 2 with "unknown argument ... (try --help; HINT)".
parse_flags_only() { _parse_args "$@"; }

# shellcheck disable=SC2034  # DRY_RUN and POSITIONAL are read by the script
_parse_args() {
  local hint="$1" arg
  shift
  DRY_RUN=0
  POSITIONAL=()
  for arg in "$@"; do
    case "$arg" in
      -h|--help) usage; exit 0 ;;
      --dry-run) DRY_RUN=1 ;;
      *)
        if [[ -n "$hint" ]]; then fail 2 "unknown argument $arg (try --help; $hint)"
        elif [[ "$arg" == -* ]]; then fail 2 "unknown option $arg (try --help)"
        else POSITIONAL+=("$arg")
        fi ;;
    esac
  done
}

# need_whole_numbers USAGE N...: exit 2 unless every N is a whole number of 1 or more.
need_whole_numbers() {
  local usage="$1" n
  shift
  for n in "$@"; do
    [[ "$n" =~ ^[0-9]+$ && "$n" =~ [1-9] ]] || fail 2 "'$n' is not a whole number of 1 or more (usage: $usage)"
  done
}

# need_at_most N USAGE: exit 2 if more than N words were given (POSITIONAL).
need_at_most() {
  if ((${#POSITIONAL[@]} > $1)); then
    fail 2 "takes at most $1 values, not ${#POSITIONAL[@]} (${POSITIONAL[*]}); usage: $2"
  fi
}

# need_a_name VALUE WHAT EXAMPLE USAGE: exit 2 if the first value is a number, as when it was
# left out and the next one took its place (`16384 4` for `Q4_K_M 16384 4`), naming the
# command with EXAMPLE put first. Nothing has started yet.
need_a_name() {
  local value="$1" what="$2" example="$3" usage="$4"
  if [[ "$value" =~ ^[0-9]+$ ]]; then
    fail 2 "'$value' is not $what: the first value is $what, such as $example (usage: $usage)." \
      "Was it left out? With it first: bash $SCRIPT $example ${POSITIONAL[*]}"
  fi
}

# need_seats_of_at_least MIN PER_SEAT WHAT: exit 2 if a seat would hold fewer than MIN tokens,
# too few for any prompt. WHAT says how PER_SEAT came about.
need_seats_of_at_least() {
  if (($2 < $1)); then
    fail 2 "$3 gives $2 tokens per seat, too few for any prompt (at least $1; lesson 06's" \
      "3,000-token opening needs more than 3,000)."
  fi
}

# missing_engine <<EOF ... EOF: print how to get the engine (the text on stdin) on
# stderr, and exit 127, as a shell does for a command it cannot find.
missing_engine() { cat >&2; exit 127; }

# answers URL: whether URL answers with success within 2 s. Asked with python3, or,
# when the script set PREFER_CURL=1, with curl if it is installed.
answers() {
  if [[ "${PREFER_CURL:-0}" == 1 ]] && command -v curl >/dev/null 2>&1; then
    curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null
  else
    python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null
  fi
}

# need_free_port PORT VARIABLE URL: exit 1 if something already answers at URL, naming
# the command that finds its process (never a kill by name) and the VARIABLE that picks another PORT.
need_free_port() {
  if answers "$3"; then
    fail 1 "something already answers on port $1 (an earlier server?). Stop that one: Ctrl+C in its" \
      "terminal, or \`kill PID\` with the PID that \`lsof -nP -iTCP:$1 -sTCP:LISTEN\` shows. Or start this" \
      "one on another port with $2=<port> and pass its address to the lesson scripts with --base-url."
  fi
}

# start_server [--log FILE] CMD...: run CMD in the background (SERVER_PID), its output
# on this terminal and, with --log, also in FILE. On exit the server is stopped (and
# FILE removed): never leave the server behind. Ctrl+C or a TERM exits 130.
start_server() {
  SERVER_LOG=""
  if [[ "$1" == --log ]]; then
    SERVER_LOG="$2"
    shift 2
  fi
  if [[ -n "$SERVER_LOG" ]]; then
    "$@" > >(tee -a "$SERVER_LOG") 2>&1 &
  else
    "$@" &
  fi
  SERVER_PID=$!
  trap stop_server EXIT
  trap 'exit 130' INT TERM
}

# stop_server: start_server's exit trap.
stop_server() {
  if kill "$SERVER_PID" 2>/dev/null; then wait "$SERVER_PID" 2>/dev/null || true; fi
  if [[ -n "$SERVER_LOG" ]]; then rm -f "$SERVER_LOG"; fi
}

# exit_if_server_stopped NAME [HINT]: if the server has exited, say that NAME stopped
# before it was ready (and HINT, if any), and exit with its status (1 if that was 0).
exit_if_server_stopped() {
  local rc
  if kill -0 "$SERVER_PID" 2>/dev/null; then return 0; fi
  wait "$SERVER_PID" && rc=0 || rc=$?
  echo "$SCRIPT_NAME: $1 stopped before it was ready (exit $rc); see its log above." >&2
  if [[ -n "${2:-}" ]]; then echo "$2" >&2; fi
  if [[ "$rc" == 0 ]]; then rc=1; fi
  exit "$rc"
}

# wait_until_healthy URL NAME [HINT]: check URL every half second until it answers;
# exit as exit_if_server_stopped says if the server stops first.
wait_until_healthy() {
  until answers "$1"; do
    exit_if_server_stopped "$2" "${3:-}"
    sleep 0.5
  done
}

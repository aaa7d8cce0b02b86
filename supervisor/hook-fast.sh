# supervise hook fast path (POSIX sh; run as: /bin/sh hook-fast.sh [--early-exit] PYTHON [ARG...]).
#
# PYTHON ARG... is the whole Python hook command (`PYTHON -I -m supervisor hook HARNESS
# --event prompt|post-tool`), exactly as `supervise install` registers it behind this file
# (registrations written before name `-P`: run the same way, isolated).
# `--early-exit` before it is written by `install` from the harness table
# (supervisor/_harnesses.py, `early_exit`) for a harness that tolerates an unread payload.
# This file knows no harness by name.
# For the per-event hooks (prompt, post-tool) this decides "nothing to do" without starting
# Python, from the payload's first 4 KiB and a few stat calls; in every other case, and
# whenever in doubt, it runs that command with the whole payload on its stdin.
#
# Rules (docs/session-protocol.md, "The per-event fast path"):
# - prints nothing itself (only Python prints envelopes) and always exits 0;
# - needs no PATH (head, cat, du and find by absolute path) and quotes every path (spaces are fine);
# - reads the payload to its end before leaving (a PostToolUse payload carries a whole file:
#   the harness's write must never fail because the hook left early), except when the
#   registration says `--early-exit` (a harness proved, with its real CLI, to ignore a hook
#   that leaves its payload unread: docs/session-protocol.md, "The per-event fast path";
#   tests/e2e/test_early_exit.py; a registration written before the flag existed drains); a
#   key repeated past the head changes nothing: Python too keeps a repeated key's first value;
# - "nothing to do" is answered only when the Python path would print nothing:
#   prompt:    no <state>/deferred/*/result-*.json (an undelivered deferred result) nor
#              reserved-*.json (a claim a killed hook may have left: Python takes it back), no
#              wake file in <state>/fastpath/ and no file watched there (watch,
#              watch.parents/) changed: its ctime, or a link in its place (features that
#              need the prompt hook to run Python register there); and for a session with a
#              trace record (fastpath/trace/<session_id>/<count>:<mark>: its harness marks
#              a compaction in its transcript) the payload's transcript_path has <count>
#              lines holding <mark> (grep -c -F);
#   post-tool: the tool is not a file tool, or every directory strictly below the payload's
#              cwd down to the file's own directory that holds AGENTS.override.md or AGENTS.md
#              (the first of the two present is its file) has that file in the session's
#              injected index: <state>/fastpath/nested/<session_id><absolute path of the file>,
#              an empty file the Python path writes once it injected that file in the current
#              compaction epoch (removed, whole, before the epoch advances). No link on the way
#              (cwd included), none inside the index, and a plain session id, or Python decides;
#              and no index of path-scoped rules for the harness (<state>/rules/<harness>.json).

if [ "${LC_ALL+set}" = set ]; then saved_lc=$LC_ALL; else saved_lc=; unset saved_lc; fi
# Byte semantics for ${#var} and patterns (bash as /bin/sh counts characters otherwise), and
# exported: head, cat, du and find then load no locale files (a cost per program per event).
export LC_ALL=C

restore_locale() {
  if [ "${saved_lc+set}" = set ]; then LC_ALL=$saved_lc; else unset LC_ALL; fi
}

# run_python PYTHON -I|-P -m supervisor ARGS... (in a pipeline's subshell: it execs): the same
# program through `-c` (no runpy and importlib.util to import: a few ms per event), in
# isolated mode (-I: the working directory, PYTHONPATH, PYTHONHOME, PYTHONSTARTUP and user
# site-packages stay off sys.path; an older `-P` registration is run isolated too). Any other
# command runs as given.
run_python() {
  if [ "$#" -ge 4 ] && { [ "$2" = -I ] || [ "$2" = -P ]; } && [ "$3" = -m ] && [ "$4" = supervisor ]; then
    py=$1
    shift 4
    exec "$py" -I -c 'import sys; sys.argv[0] = "supervise"; from supervisor._main import entry; entry()' "$@"
  fi
  exec "$@"
}

# `--early-exit` (written by install from the harness table): no drain; without it, the drain.
early_exit=
if [ "${1:-}" = --early-exit ]; then
  early_exit=1
  shift
fi
event=
prev=
for arg in "$@"; do
  case $prev in --event) event=$arg ;; esac
  case $arg in --event=*) event=${arg#--event=} ;; esac
  prev=$arg
done

# tool NAME: $found = /usr/bin/NAME or /bin/NAME, the first executable one ("" when neither
# is). SUPERVISE_SHIM_BIN (for tests: a host without GNU du, say) names the one folder to
# look in instead.
tool() {
  found=
  if [ -n "${SUPERVISE_SHIM_BIN:-}" ]; then
    if [ -x "$SUPERVISE_SHIM_BIN/$1" ]; then found=$SUPERVISE_SHIM_BIN/$1; fi
    return 0
  fi
  if [ -x "/usr/bin/$1" ]; then found=/usr/bin/$1; elif [ -x "/bin/$1" ]; then found=/bin/$1; fi
  return 0
}
nl='
'
tab='	'
tool head; hd=$found
tool cat; ct=$found

if [ ! -x "${1:-}" ]; then
  echo "supervise hook: interpreter ${1:-(none)} is missing or not executable; run \`supervise install\` again; hook skipped" >&2
  if [ -n "$ct" ]; then "$ct" >/dev/null 2>&1; fi
  exit 0
fi

case $event in
  prompt|post-tool) ;;
  *) restore_locale; "$@"; exit 0 ;;  # not a per-event hook: Python reads the payload itself
esac
if [ -z "$hd" ] || [ -z "$ct" ]; then
  restore_locale; "$@"; exit 0
fi

# The payload's first 4 KiB. $(...) drops trailing newlines: between JSON tokens they are
# insignificant whitespace, and inside a string they would be invalid JSON anyway. Well under
# 4096 bytes read means stdin is at its end (only a run of >= 1024 newlines could mislead that,
# and then the drain is merely skipped on a payload whose end is blank lines).
# head failed (no -c, or stdin unreadable): Python reads stdin itself; the hook exits 0 even
# when Python cannot start on such a stdin (a directory is fatal to its init)
head=$(exec "$hd" -c 4096 2>/dev/null) || { restore_locale; "$@"; exit 0; }
here=$PWD

slow() {
  restore_locale
  cd -- "$here" 2>/dev/null
  { printf '%s' "$head"; exec "$ct"; } | run_python "$@"
  exit 0
}

nothing() {
  # A registration with `--early-exit` is for a harness proved with its real CLI to ignore the
  # EPIPE of a payload the hook left unread (the hook's exit status and output stand): no
  # drain, which spares a third program (`cat`) per event. Otherwise a payload
  # longer than the head is read to its end (the harness's write never meets a closed pipe)
  # and dropped: a key repeated past the head changes nothing, since Python, like this file,
  # keeps a repeated key's FIRST value (supervisor/session/_payload.py).
  # Not `exec cat` (one fork less): its status would be the hook's (a stdin the harness made
  # non-blocking fails with EAGAIN), and the hook exits 0 whatever happens.
  if [ -n "$early_exit" ]; then exit 0; fi
  if [ "${#head}" -ge 3072 ]; then "$ct" >/dev/null 2>&1; fi
  exit 0
}

# json_str KEY: $val = the string value of the object member "KEY" found in $head at the top
# level (the first member, or after a ',' with no '{' or '[' before it but the opening one);
# status 1 when absent, nested, cut off by the 4 KiB head, repeated, holding an escape, or
# after an escape (a key spelled with \u escapes is the same key to Python): those are left
# to Python.
json_str() {
  case $head in *\"$1\"*\"$1\"*) return 1 ;; esac  # the key twice, however spaced: Python decides
  case $head in *[{,]\"$1\":\"*) ;; *) return 1 ;; esac
  pre=${head%%[{,]\"$1\":\"*}
  # an escape before it: "\u0063wd" is "cwd" to Python, whose FIRST value would be that one
  case $pre in *\\*) return 1 ;; esac
  top_level "$pre" || return 1
  val=${head#"$pre"?\"$1\":\"}
  case $val in *[{,]\"$1\":*) return 1 ;; esac
  case $val in *\"*) ;; *) return 1 ;; esac
  val=${val%%\"*}
  case $val in *\\*) return 1 ;; esac
  return 0
}

# top_level PRE: status 0 when the member that follows PRE (the start of $head up to the ','
# or '{' before the member's key) is at the top level: PRE is empty (the opening '{' itself),
# or a ',' follows it and PRE holds no '{' or '[' but the opening one.
top_level() {
  case $1 in "") return 0 ;; esac
  case ${head#"$1"} in ,*) ;; *) return 1 ;; esac
  case ${1#\{} in *[{[]*) return 1 ;; esac
  return 0
}

# watch_verdict LIST LINKS: $verdict = "same" when no watched file changed since Python took
# its baseline, "changed" when one may have (Python must run), "" when this host's tools could
# not tell (the caller runs Python). LINKS (fastpath/watch.parents, written by Python with
# LIST) holds, per watched file /dir/NAME, a symlink "<n>-NAME" to /dir and an empty file
# ".ctime-<n>-<ns>" (its ctime then; ".absent-<n>" for a file absent then, none for one a
# baseline holds a stale hash of), and an empty file ".since-<ns>": the baseline's time in
# nanoseconds (MTIME_SLACK seconds back, as LIST's mtime). A ctime must be before the stamp
# AND (with du, which prints it in ns) the one recorded: a clock set back after the baseline
# gives an edit a ctime before the stamp.
# Through "<n>-NAME/NAME" the shell itself sees a watched file that is missing, not a regular
# file, or a symlink (one planted in its place: its target's old ctime would say nothing);
# then one program compares the ctimes: every write, rename, chmod or utime sets a file's ctime
# to now and no user tool can set it back, so it catches the edits that keep an old mtime
# (`cp -p`, `mv backup AGENTS.md`, `tar x`, `rsync -a`, `touch -r`, `touch -d`, clock skew).
# GNU du (libc alone: cheaper to start than find) prints each ctime in ns; where du cannot
# (BusyBox, BSD, macOS: it fails), find -newer/-cnewer LIST decides. Nothing is opened.
watch_verdict() {
  verdict=changed
  since=
  for wv in "$2"/.since-*; do
    if [ -n "$since" ]; then return 0; fi  # two stamps: not Python's
    since=${wv#"$2"/.since-}
  done
  # digits, under 2**63 (9?????????????????? could overflow the shell's test)
  case $since in ""|0*|*[!0-9]*|9??????????????????|????????????????????*) return 0 ;; esac
  wv_list=$1
  wv_links=$2
  wv_want=
  set --
  for wv in "$wv_links"/*; do
    if [ "$wv" = "$wv_links/*" ] && [ ! -e "$wv" ] && [ ! -L "$wv" ]; then break; fi  # none
    wv_name=${wv##*/}
    case $wv_name in [0-9]*-?*) ;; *) return 0 ;; esac
    case ${wv_name%%-*} in *[!0-9]*) return 0 ;; esac
    wv_file=$wv/${wv_name#*-}
    # absent at the baseline (".absent-<n>"): unchanged while it is still absent (its folder
    # gone too); there again, or a link in its place, is a change
    if [ -e "$wv_links/.absent-${wv_name%%-*}" ] || [ -L "$wv_links/.absent-${wv_name%%-*}" ]; then
      if [ ! -L "$wv" ] || [ -e "$wv_file" ] || [ -L "$wv_file" ]; then return 0; fi
      continue
    fi
    if [ ! -L "$wv" ] || [ ! -d "$wv" ] || [ -L "$wv_file" ] || [ ! -f "$wv_file" ]; then
      return 0
    fi
    # its ctime at the baseline (one record, digits): du's must be that one
    wv_c=
    for wv_r in "$wv_links/.ctime-${wv_name%%-*}-"*; do
      if [ -n "$wv_c" ]; then return 0; fi
      wv_c=${wv_r#"$wv_links/.ctime-${wv_name%%-*}-"}
    done
    case $wv_c in ""|0*|*[!0-9]*) return 0 ;; esac
    wv_want="$wv_want $wv_c"
    set -- "$@" "$wv_file"
  done
  if [ "$#" -eq 0 ]; then verdict=same; return 0; fi
  tool du
  if [ -n "$found" ]; then
    # "<blocks>\t<ctime ns>\t<path>" a line; -l: a file linked twice is listed twice
    if wv_out=$("$found" -l --time=ctime --time-style=+%s%N -- "$@" 2>/dev/null); then
      wv_left=$#
      while [ -n "$wv_out" ]; do
        wv_line=${wv_out%%"$nl"*}
        case $wv_out in *"$nl"*) wv_out=${wv_out#*"$nl"} ;; *) wv_out= ;; esac
        wv_time=${wv_line#*"$tab"}
        wv_time=${wv_time%%"$tab"*}
        case $wv_time in ""|0*|*[!0-9]*|9??????????????????|????????????????????*) wv_left=-1; break ;; esac
        if [ "$wv_time" -lt "$since" ]; then :; else return 0; fi  # (an error is "changed" too)
        # and the ctime recorded with the baseline: a clock set back since then gives an edit
        # a ctime before the stamp, never this one
        wv_want=${wv_want# }
        case $wv_want in "$wv_time"|"$wv_time "*) wv_want=${wv_want#"$wv_time"} ;; *) return 0 ;; esac
        wv_left=$((wv_left - 1))
      done
      if [ "$wv_left" -eq 0 ]; then verdict=same; return 0; fi
    fi
  fi
  tool find
  if [ -z "$found" ]; then verdict=; return 0; fi
  wv_out=$("$found" "$@" -prune \( -type l -o -newer "$wv_list" -o -cnewer "$wv_list" \) -print 2>/dev/null) || return 0
  case $wv_out in "") verdict=same ;; esac
  return 0
}

# find_state: $state = the state dir of the payload's project (SUPERVISE_STATE_DIR, else the
# nearest directory holding .git above cwd, symlinks resolved, plus /.supervise), as Python's
# state_dir_for(find_project_root(cwd)); the shell is left in cwd's physical path ($PWD).
find_state() {
  cd -P -- "$cwd" 2>/dev/null || return 1  # slow() goes back to $here first
  case $PWD in /*) ;; *) return 1 ;; esac
  if [ -n "${SUPERVISE_STATE_DIR:-}" ]; then
    case $SUPERVISE_STATE_DIR in /*) state=$SUPERVISE_STATE_DIR; return 0 ;; *) return 1 ;; esac
  fi
  fs_top=$PWD  # (its own names: the caller's $dir survives)
  fs_dir=$fs_top
  while :; do
    if [ -e "$fs_dir/.git" ]; then fs_top=$fs_dir; break; fi
    case $fs_dir in /|"") break ;; esac
    fs_dir=${fs_dir%/*}
    case $fs_dir in "") fs_dir=/ ;; esac
  done
  state=${fs_top%/}/.supervise
}

# The payload is JSON text starting with '{' (whitespace before it: leave it to Python).
case $head in \{*) ;; *) slow "$@" ;; esac
# A payload naming workspace_roots (Cursor's: its project is workspace_roots[0], not cwd,
# supervisor/session/_payload.py): Python decides
case $head in *\"workspace_roots\"*) slow "$@" ;; esac
json_str cwd || slow "$@"
cwd=$val
case $cwd in /*) ;; *) slow "$@" ;; esac

if [ "$event" = post-tool ]; then
  json_str tool_name || slow "$@"
  # the harness table's file_tools of every row (supervisor/_harnesses.py FILE_TOOLS: Claude
  # Code's, Gemini CLI's, Qwen Code's); tests/test_fastpath.py runs each of them through this gate
  case $val in
    Read|Edit|MultiEdit|Write|NotebookRead|NotebookEdit) ;;
    read_file|replace|write_file|edit) ;;
    *) nothing ;;  # not a file tool: the Python path injects nothing
  esac
  # the file: tool_input's first member, file_path or notebook_path
  case $head in
    *[{,]\"tool_input\":\{\"file_path\":\"*) key=file_path ;;
    *[{,]\"tool_input\":\{\"notebook_path\":\"*) key=notebook_path ;;
    *) slow "$@" ;;
  esac
  # Python prefers file_path wherever it stands: with notebook_path first, a file_path in the
  # head, or a head that may be cut before one, leaves the answer to Python
  if [ "$key" = notebook_path ]; then
    case $head in *\"file_path\"*) slow "$@" ;; esac
    if [ "${#head}" -ge 3072 ]; then slow "$@"; fi
  fi
  case $head in *\"tool_input\"*\"tool_input\"*|*\"$key\"*\"$key\"*) slow "$@" ;; esac
  pre=${head%%[{,]\"tool_input\":\{\""$key"\":\"*}
  case $pre in *\\*) slow "$@" ;; esac  # an escaped "tool_input" may come first
  top_level "$pre" || slow "$@"
  val=${head#"$pre"?\"tool_input\":\{\""$key"\":\"}
  case $val in *\"*) ;; *) slow "$@" ;; esac
  file=${val%%\"*}
  case $file in /*) ;; *) slow "$@" ;; esac
  case $file in *\\*|*//*|*/./*|*/../*|*/.|*/..) slow "$@" ;; esac
  base=${cwd%/}
  case $cwd in *//*|*/./*|*/../*|*/.|*/..) slow "$@" ;; esac
  case $file in "$base"/*) ;; *) slow "$@" ;; esac  # outside cwd (or via a link): Python decides
  rel=${file#"$base"/}
  # path-scoped rules indexed for this harness (supervisor/session/_rules.py): Python
  # matches the file against their globs
  # (the harness is the registered command's argument: PYTHON -I|-P -m supervisor hook NAME;
  # another shape leaves every read with an index to Python)
  find_state || slow "$@"
  rules=
  if [ "$#" -ge 6 ] && [ "$3" = -m ] && [ "$4" = supervisor ] && [ "$5" = hook ]; then
    rules=$6
  fi
  for found in "$state/rules/${rules:-*}.json"; do
    if [ -e "$found" ] || [ -L "$found" ]; then slow "$@"; fi
  done
  dir=$base
  idx=
  linked=
  while :; do
    case $rel in */*) ;; *) break ;; esac
    dir=$dir/${rel%%/*}
    rel=${rel#*/}
    if [ -L "$dir" ]; then linked=1; fi
    if [ -e "$dir/AGENTS.override.md" ] || [ -L "$dir/AGENTS.override.md" ]; then
      name=AGENTS.override.md
    elif [ -e "$dir/AGENTS.md" ] || [ -L "$dir/AGENTS.md" ]; then
      name=AGENTS.md
    else
      continue
    fi
    # Injected already in this epoch? Only for a plain regular file reached through no link
    # (the index holds real paths), with the session's index itself no link.
    if [ -n "$linked" ] || [ -L "$dir/$name" ] || [ ! -f "$dir/$name" ]; then slow "$@"; fi
    if [ -z "$idx" ]; then
      json_str session_id || slow "$@"
      case $val in ""|[!A-Za-z0-9]*|*[!A-Za-z0-9_-]*) slow "$@" ;; esac
      if [ "${#val}" -gt 128 ]; then slow "$@"; fi
      find_state || slow "$@"
      if [ "$PWD" != "${base:-/}" ]; then slow "$@"; fi  # a link in cwd's own path
      idx=$state/fastpath/nested/$val
      if [ -L "$state" ] || [ -L "$state/fastpath" ] || [ -L "$state/fastpath/nested" ] \
         || [ -L "$idx" ] || [ ! -d "$idx" ]; then slow "$@"; fi
    fi
    if [ -L "$idx$dir/$name" ] || [ ! -f "$idx$dir/$name" ]; then slow "$@"; fi
    # and no link inside the index on the way to it (one planted there, say to /, would make
    # every instruction file its own entry): its folder's physical path is its path
    cd -P -- "$idx$dir" 2>/dev/null || slow "$@"
    if [ "$PWD" != "$idx$dir" ]; then slow "$@"; fi
  done
  nothing
fi

# prompt: the state dir of the payload's project.
find_state || slow "$@"
for found in "$state"/deferred/*/result-*.json "$state"/deferred/.*/result-*.json \
             "$state"/deferred/*/reserved-*.json "$state"/deferred/.*/reserved-*.json \
             "$state"/fastpath/wake*; do
  if [ -e "$found" ] || [ -L "$found" ]; then slow "$@"; fi
done
# A session whose harness traces its compactions in its transcript (fastpath/trace/<session
# id>/<count>:<mark>, supervisor/session/_fastpath.py set_trace): Python runs when the
# transcript's count of lines holding <mark> is not <count> (a compaction happened, or the
# count is not known yet: "-"), or whenever this cannot tell. Only names are listed here;
# grep reads the harness's transcript, no state file.
trace=$state/fastpath/trace
if [ -e "$trace" ] || [ -L "$trace" ]; then
  if [ -L "$state" ] || [ -L "$state/fastpath" ] || [ -L "$trace" ] || [ ! -d "$trace" ]; then slow "$@"; fi
  if json_str session_id; then
    case $val in ""|[!A-Za-z0-9]*|*[!A-Za-z0-9_-]*) slow "$@" ;; esac
    if [ "${#val}" -gt 128 ]; then slow "$@"; fi
    rec=$trace/$val
    if [ -e "$rec" ] || [ -L "$rec" ]; then
      if [ -L "$rec" ] || [ ! -d "$rec" ]; then slow "$@"; fi
      entry=
      for found in "$rec"/*; do
        if [ -n "$entry" ]; then slow "$@"; fi  # two entries: Python decides
        entry=${found##*/}
      done
      want=${entry%%:*}
      mark=${entry#*:}
      case $want in ""|*[!0-9]*) slow "$@" ;; esac  # "-" (not known), or no entry ("*")
      if [ "$mark" = "$entry" ] || [ -z "$mark" ]; then slow "$@"; fi
      json_str transcript_path || slow "$@"
      case $val in /*) ;; *) slow "$@" ;; esac
      if [ -L "$val" ] || [ ! -f "$val" ]; then slow "$@"; fi
      tool grep
      if [ -z "$found" ]; then slow "$@"; fi
      have=$("$found" -c -F -e "$mark" -- "$val" 2>/dev/null)
      case $have in ""|*[!0-9]*) slow "$@" ;; esac
      if [ "$have" != "$want" ]; then slow "$@"; fi
    fi
  else
    # no plain session id to look up: a traced session cannot be told apart
    for found in "$trace"/*; do
      if [ -e "$found" ] || [ -L "$found" ]; then slow "$@"; fi
    done
  fi
fi
# The state dir is untrusted input (issue 11): with a linked state dir or fastpath folder, a
# watch list that is a link or not a regular file (a FIFO), or a watch.parents that is a link
# or not a folder, Python's state door decides. Nothing there is opened here (du and find
# only stat).
if [ -L "$state" ] || [ -L "$state/fastpath" ]; then slow "$@"; fi
watch=$state/fastpath/watch
links=$state/fastpath/watch.parents
if [ -e "$watch" ] || [ -L "$watch" ]; then
  if [ -L "$watch" ] || [ ! -f "$watch" ]; then slow "$@"; fi
  if [ -L "$links" ] || [ ! -d "$links" ]; then slow "$@"; fi  # a list without its links
  watch_verdict "$watch" "$links"
  if [ "$verdict" != same ]; then slow "$@"; fi
else
  # refresh baselines without a watch list (it could not be written): Python compares them
  for found in "$state"/refresh/*.json; do
    if [ -e "$found" ] || [ -L "$found" ]; then slow "$@"; fi
  done
fi
nothing

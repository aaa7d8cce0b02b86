#!/bin/sh
# A stand-in for `<python> -P -m supervisor bridge ...` in the extension logic tests.
# Arguments: -P -m supervisor bridge --harness H --source S [--session-id ID] [--cwd DIR].
# FAKE_MODE: ready (default) | slow (never finishes; TERM-ignoring children, one in its own
# session) | ineligible | failed | garbage. Each launch appends its source to $FAKE_LOG.
# `... -m supervisor hook H --event E` (the per-turn and per-read asks): the payload is read;
# the file $FAKE_TURN, when present, is printed once and removed; $FAKE_TURNS logs each ask.
case " $* " in
  *" hook "*)
    cat >/dev/null
    if [ -n "${FAKE_TURNS:-}" ]; then echo "$*" >> "$FAKE_TURNS"; fi
    if [ -n "${FAKE_TURN:-}" ] && [ -f "$FAKE_TURN" ]; then cat "$FAKE_TURN"; rm -f "$FAKE_TURN"; fi
    exit 0 ;;
esac
source=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--source" ]; then source="$2"; shift; fi
  shift
done
echo "$source" >> "$FAKE_LOG"
mode="${FAKE_MODE:-ready}"
if [ "$mode" = ready ]; then
  printf '{"kind":"ready","text":"DIGEST-%s\\n","source":"%s","mode":"full","protocol":1}\n' "$source" "$source"
elif [ "$mode" = ineligible ]; then
  printf '{"kind":"ineligible","text":"","source":"%s","error":"gate","protocol":1}\n' "$source"
elif [ "$mode" = failed ]; then
  printf '{"kind":"failed","text":"","source":"%s","error":"boom","protocol":1}\n' "$source"
elif [ "$mode" = garbage ]; then
  echo "not json"
elif [ "$mode" = slow ]; then
  trap '' TERM
  sh -c 'trap "" TERM; exec sleep 300' &
  echo $! >> "$FAKE_PIDS.tmp"
  # not a group leader (no job control), so setsid(1) makes its session in place: $! is it
  setsid sh -c 'trap "" TERM; exec sleep 300' &
  echo $! >> "$FAKE_PIDS.tmp"
  echo $$ >> "$FAKE_PIDS.tmp"
  mv "$FAKE_PIDS.tmp" "$FAKE_PIDS"
  exec sleep 300
fi

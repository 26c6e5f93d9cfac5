#!/usr/bin/env bash
# loop.sh STEP: run `delayq run` every STEP seconds (1..60) until this minute is over, for
# sub-minute precision from a once-a-minute cron line. It stops before the next minute's
# start; a run that overruns its step only delays the next one, and two runs that overlap are
# safe because every claim is atomic.
set -u
step=${1:-5}
if ! [[ "$step" =~ ^[0-9]+$ ]] || [ "$step" -lt 1 ] || [ "$step" -gt 60 ]; then
  echo "usage: loop.sh STEP   (STEP: whole seconds, 1..60)" >&2
  exit 2
fi
delayq=${DELAYQ:-delayq}
minute_end=$(( $(date +%s) / 60 * 60 + 60 ))
status=0
while :; do
  started=$(date +%s)
  "$delayq" run --max-seconds "$(( minute_end - started > 1 ? minute_end - started - 1 : 1 ))" || status=$?
  next=$(( started + step ))
  [ "$next" -ge "$minute_end" ] && break
  now=$(date +%s)
  [ "$next" -gt "$now" ] && sleep $(( next - now ))
done
exit "$status"

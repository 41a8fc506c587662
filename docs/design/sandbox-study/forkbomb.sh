#!/bin/bash
# Bounded fork-bomb test. NEVER run the bomb without the limit.
# Usage: [BOMB='...'] [SAMPLES=N] [TMO=10] ./forkbomb.sh [extra sbx run flags, e.g. --pidns]
# Runs the bomb inside the recommended sandbox (uid 65534 + userns + netns + landlock + scopes
# + RLIMIT_NPROC=64 + RLIMIT_CPU=20s + RLIMIT_DATA=1G) under `timeout -s KILL $TMO`,
# samples the host once a second, and cleans up leftovers at the end.
set -u
S=/work/sandbox-study/target/release/sbx
U=65534
BOMB=${BOMB:-':(){ :|:& };:'}
SAMPLES=${SAMPLES:-12}
TMO=${TMO:-10}
ERR=/work/sandbox-study/run/bomb.stderr
live() { ps -u $U -o stat= | grep -vc "^Z"; }
zomb() { ps -u $U -o stat= | grep -c "^Z"; }
# leftover zombies of an earlier run are reaped lazily by PID 1 here: wait for them
for i in $(seq 1 20); do [ "$(ps -u $U --no-headers | wc -l)" -eq 0 ] && break; sleep 0.5; done
before=$(live)
echo "bomb: $BOMB   extra flags: ${*:-(none)}"
echo "processes of uid $U before: $before"
[ "$before" -eq 0 ] || { echo "refusing: uid $U already has processes"; exit 1; }
( for i in $(seq 1 $SAMPLES); do
    t0=$(date +%s%N); /bin/true; t1=$(date +%s%N)
    echo "  t=${i}s uid$U-live=$(live) zombies=$(zomb) load=$(cut -d' ' -f1 /proc/loadavg) host-/bin/true=$(( (t1-t0)/1000 ))us memavail=$(awk '/MemAvailable/{print int($2/1024)"MiB"}' /proc/meminfo)"
    sleep 1
  done ) &
sampler=$!
start=$(date +%s%N)
timeout -s KILL $TMO $S run --uid $U --userns --netns --landlock --scopes --nproc 64 --cpu 20 --data 1G "$@" -- /bin/bash -c "$BOMB" 2>$ERR
echo "sandbox run returned rc=$? after $(( ($(date +%s%N)-start)/1000000 )) ms; bomb stderr lines: $(wc -l < $ERR) ($(grep -c 'fork: retry' $ERR) 'fork: retry')"
wait $sampler
left=$(live)
echo "live processes of uid $U at end of sampling: $left (zombies: $(zomb))"
if [ "$left" -gt 0 ]; then
  # every uid-65534 process on this machine is ours (checked above); kill(-1) as that uid
  # is atomic w.r.t. fork (tasklist lock), so the bomb cannot outrun it.
  setpriv --reuid $U --regid $U --clear-groups /bin/bash -c 'kill -KILL -1'
  sleep 0.5
  echo "after kill(-1) as uid $U: live=$(live) zombies=$(zomb)"
fi

#!/bin/bash
# Re-run every experiment of the sandbox feasibility study. Must run as root (it also
# exercises the non-root path via `setpriv --reuid 61001`). Writes results-*.txt here.
set -eu
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=$PWD/target
command -v bwrap >/dev/null || { apt-get update && apt-get install -y bubblewrap; }
cargo build --release -j1
chmod 755 . target target/release
mkdir -p run-61001 && chown 61001:61001 run-61001
S=./target/release/sbx; H=$PWD/target/release/sbx
$S abi                                  | tee results-abi.txt
$S fs-demo                              | tee results-fs-demo.txt
$S net-demo                             | tee results-net-demo.txt
./target/release/sbx_tokio              | tee results-tokio.txt
$S probe                                | tee results-probe.txt
SBX_DIR=$PWD/run-61001 setpriv --reuid 61001 --regid 61001 --clear-groups $S probe | tee -a results-probe.txt
# RLIMIT_NPROC matrix (bounded: 100 forks, limit 20)
for v in "" "--userns" "--uid 61000" "--uid 61000 --userns" "--uid 65534 --userns --netns --landlock"; do
  echo "root parent, flags: ${v:-(none)}: $($S run $v --nproc 20 -- $H helper forks 100 2>/dev/null)"
done | tee results-nproc.txt
for v in "" "--userns" "--userns --netns --landlock --scopes"; do
  echo "uid 61001 parent, flags: ${v:-(none)}: $(SBX_DIR=$PWD/run-61001 setpriv --reuid 61001 --regid 61001 --clear-groups $S run $v --nproc 20 -- $H helper forks 100 2>/dev/null)"
done | tee -a results-nproc.txt
# two concurrent sandboxes sharing uid 65534: A holds 15 procs, B tries 100 (limit 20 each)
for v in "" "--userns" "--userns --rlimits-first"; do
  $S run --uid 65534 $v --nproc 20 -- $H helper forks 15 3000 >/dev/null 2>&1 &
  sleep 0.5; echo "shared uid, flags: ${v:-(none)}: B $($S run --uid 65534 $v --nproc 20 -- $H helper forks 100 2>/dev/null)"; wait
done | tee -a results-nproc.txt
SAMPLES=8 ./forkbomb.sh          | tee results-forkbomb-nproc.txt
BOMB=':(){ :|:& };:; sleep 100' TMO=5 SAMPLES=7 ./forkbomb.sh --pidns | tee results-forkbomb-pidns.txt
$S unshare-cost 200                     | tee results-unshare-cost.txt
$S bench -n 200 plain plain+empty-pre_exec rlimits setuid landlock netns userns+netns full full+map-ids \
   full+mntns-tmp full+pidns full-via-helper bwrap-net bwrap-net-user bwrap-all | tee results-bench-ballast0.txt
for b in 128 512; do $S bench -n 100 --ballast-mb $b plain plain+empty-pre_exec full full-via-helper bwrap-net; done \
   | tee results-bench-ballast.txt

#!/usr/bin/env bash
# timeout: 300
# The daemons' training path above a device backend's walls: jobs_single.sh (watch, export,
# evaluate and predict on one daemon), jobs_devices.sh (2 CPU replicas a daemon, the in-host and
# hierarchical all-reduces, 2 daemons following 1) and jobs_resume.sh (a checkpoint resumed
# after the chief's restart) run again with DTRAIN_OPS_GUARD=1: every model takes the guarded
# ops table, whose memory faults on any host access outside a kernel, upload or download, as a
# GPU's would. Each must pass as it does on the CPU table (same hashes: the guard runs the CPU's
# kernels).
source "$(dirname "$0")/lib.sh"

for t in jobs_single jobs_devices jobs_resume; do
  rc=0
  DT_TEST_TMP=$DT_TEST_TMP/$t DTRAIN_OPS_GUARD=1 bash "$DT_SRC_DIR/test/integration/$t.sh" \
    >"$DT_TEST_TMP/$t.out" 2>&1 || rc=$?
  if ((rc != 0)); then
    tail -40 "$DT_TEST_TMP/$t.out" >&2
    grep -rh -A12 "ops guard" "$DT_TEST_TMP/$t" >&2 || true
    dt_fail "$t.sh under the guarded ops table: exit $rc"
  fi
  grep -q "ops guard" -r "$DT_TEST_TMP/$t" && dt_fail "$t.sh: the guard reported an access"
  echo "$t: passed under the guard"
done

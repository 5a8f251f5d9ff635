#!/usr/bin/env bash
# timeout: 120
# Two daemons with mutual TLS (certificates from scripts/gen-tls.sh) form a cluster, answer the
# CLI (with a client certificate), run a verified ring all-reduce (streams over TLS) and train a
# tiny job (job RPCs over TLS); a plaintext client, a client without a certificate, one from
# another CA and one whose key does not match its certificate are all refused, each saying why.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"
dt_require_cmd openssl

tls=$DT_TEST_TMP/tls
"$DT_SRC_DIR/scripts/gen-tls.sh" -o "$tls" host=127.0.0.1,localhost admin >/dev/null
"$DT_SRC_DIR/scripts/gen-tls.sh" -o "$tls/other" admin >/dev/null

jobs_data
jobs_spec "$DT_TEST_TMP/tiny.json" 1 32
jobs_daemons 2 mt --tls-cert "$tls/host.pem" --tls-key "$tls/host.key" --tls-ca "$tls/ca.pem"
dt_assert_contains "$DT_TEST_TMP/mt-w0.log" "TLS mutual" "worker:0 says it serves mutual TLS"

export DTRAIN_TLS_CA=$tls/ca.pem DTRAIN_TLS_CERT=$tls/admin.pem DTRAIN_TLS_KEY=$tls/admin.key
j=$(jc cluster --json) || dt_fail "dtrain cluster over TLS"
dt_assert_eq "$(dt_json_get tasks.1.state <<<"$j")" joined "worker:1 joined over TLS"

# The ring's streams: a real all-reduce, checked element by element.
out=$(jc bench allreduce --sizes 256K,2M --iters 2 --verify --json) || dt_fail "bench allreduce over TLS: $out"
dt_assert_eq "$(dt_json_get world_size <<<"$out")" 2 "all-reduce world size"
dt_assert_eq "$(dt_json_get rows.1.bytes <<<"$out")" 2097152 "all-reduce of 2M ran"

# The job service: chief -> worker RPCs and the training ring.
jc submit "$DT_TEST_TMP/tiny.json" --watch --json >"$DT_TEST_TMP/watch.jsonl" ||
  dt_fail "the job over TLS did not succeed: $(tail -1 "$DT_TEST_TMP/watch.jsonl")"
jc status 1 --json >"$DT_TEST_TMP/s1.json"
dt_assert_eq "$(dt_json_get state "$DT_TEST_TMP/s1.json")" succeeded "job state"
dt_assert_eq "$(dt_json_get weights_hashes.1 "$DT_TEST_TMP/s1.json")" \
  "$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/s1.json")" "both replicas' weights"

# Flags work as well as the environment.
unset DTRAIN_TLS_CA DTRAIN_TLS_CERT DTRAIN_TLS_KEY
"$DT_BIN_DIR/dtrain" --tls-ca "$tls/ca.pem" --tls-cert "$tls/admin.pem" --tls-key "$tls/admin.key" \
  cluster --addr "$JOBS_ADDR" --timeout 5 >/dev/null || dt_fail "dtrain --tls-* flags"

# Refusals: exit 1 and a reason.
set +e
out=$(jc cluster --timeout 3 2>&1)
rc=$?
set -e
dt_assert_eq "$rc" 1 "plaintext client exit status"
dt_assert_contains "$out" "serves TLS, give --tls-ca" "plaintext client to a TLS daemon"

set +e
out=$(jc --tls-ca "$tls/ca.pem" cluster --timeout 3 2>&1)
rc=$?
set -e
dt_assert_eq "$rc" 1 "client without a certificate exit status"
dt_assert_contains "$out" "TLS handshake with $JOBS_ADDR failed.*client certificate \(--tls-cert/--tls-key\)" "client without a certificate"

set +e
out=$("$DT_BIN_DIR/dtrain" --tls-ca "$tls/other/ca.pem" --tls-cert "$tls/other/admin.pem" \
  --tls-key "$tls/other/admin.key" cluster --addr "$JOBS_ADDR" --timeout 3 2>&1)
rc=$?
set -e
dt_assert_eq "$rc" 1 "client of another CA exit status"
dt_assert_contains "$out" "failed verification against $tls/other/ca.pem" "client of another CA"

set +e
out=$(jc --tls-ca "$tls/ca.pem" --tls-cert "$tls/admin.pem" --tls-key "$tls/host.key" cluster --timeout 3 2>&1)
rc=$?
set -e
dt_assert_eq "$rc" 1 "client key of another certificate: exit status"
dt_assert_contains "$out" "could not use --tls-cert $tls/admin.pem with --tls-key $tls/host.key" \
  "client key of another certificate"

dt_stop_daemon mt-w1 5
dt_stop_daemon mt-w0 5

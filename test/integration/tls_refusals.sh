#!/usr/bin/env bash
# timeout: 90
# TLS start-up and connection refusals: a daemon given a missing, garbage or encrypted file, or a
# key that does not match its certificate, exits 2 naming the file(s) before it serves;
# server-only TLS keeps the token rule and the token check; a client trusting another CA, or
# dialing a name the certificate lacks, fails saying so; a TLS client to a plaintext daemon is
# told so; --check reports TLS.
source "$(dirname "$0")/lib.sh"
dt_require_cmd openssl

tls=$DT_TEST_TMP/tls
"$DT_SRC_DIR/scripts/gen-tls.sh" -o "$tls" host=127.0.0.1,localhost far=10.200.0.9 >/dev/null
"$DT_SRC_DIR/scripts/gen-tls.sh" -o "$tls/other" x >/dev/null
echo "not a certificate" >"$tls/garbage.pem"
head -c 32 /dev/urandom | base64 >"$DT_TEST_TMP/token"
chmod 600 "$DT_TEST_TMP/token"
mapfile -t ports < <(dt_free_ports 3)
addr=127.0.0.1:${ports[0]}

# refused START_ARGS PATTERN MSG: dtraind exits 2 at once, saying PATTERN.
refused() {
  local pattern=$1 msg=$2 rc=0
  shift 2
  timeout 10 "$DT_BIN_DIR/dtraind" --listen "$addr" --state-dir "$DT_TEST_TMP/st" "$@" \
    >"$DT_TEST_TMP/refused.log" 2>&1 || rc=$?
  dt_assert_eq "$rc" 2 "$msg: exit status"
  dt_assert_contains "$DT_TEST_TMP/refused.log" "$pattern" "$msg"
}
refused "--tls-cert: $tls/missing.pem: cannot open" "missing certificate" \
  --tls-cert "$tls/missing.pem" --tls-key "$tls/host.key"
refused "--tls-cert $tls/garbage.pem: not a PEM file" "garbage certificate" \
  --tls-cert "$tls/garbage.pem" --tls-key "$tls/host.key"
openssl pkey -in "$tls/host.key" -aes256 -passout pass:x -out "$tls/enc.key"
refused "--tls-key $tls/enc.key: the key is encrypted" "encrypted key" \
  --tls-cert "$tls/host.pem" --tls-key "$tls/enc.key"
refused "gRPC refused --tls-cert $tls/host.pem with --tls-key $tls/far.key: the key does not match" \
  "key of another certificate" --tls-cert "$tls/host.pem" --tls-key "$tls/far.key"
refused "--tls-ca alone" "CA without a certificate" --tls-ca "$tls/ca.pem"
# Server-only TLS is not an identity check: off loopback it still needs a token.
refused "without a token" "server-only TLS on 0.0.0.0 without a token" \
  --listen "0.0.0.0:${ports[2]}" --tls-cert "$tls/host.pem" --tls-key "$tls/host.key"

j=$("$DT_BIN_DIR/dtraind" --listen "$addr" --tls-cert "$tls/host.pem" --tls-key "$tls/host.key" \
  --tls-ca "$tls/ca.pem" --check --json)
dt_assert_eq "$(dt_json_get tls <<<"$j")" mutual "--check --json tls"
j=$("$DT_BIN_DIR/dtraind" --listen "$addr" --check --json)
dt_assert_eq "$(dt_json_get tls <<<"$j")" off "--check --json tls without flags"

# Server-only TLS with a token: the token is still checked over TLS.
dt_start_daemon srv -- --listen "$addr" --tls-cert "$tls/host.pem" --tls-key "$tls/host.key" \
  --token-file "$DT_TEST_TMP/token" --state-dir "$DT_TEST_TMP/srv" --ready-file "$DT_TEST_TMP/srv.ready"
dt_wait_file "$DT_TEST_TMP/srv.ready" --timeout 20 || dt_fail "the server-only TLS daemon never formed"
dtr() { "$DT_BIN_DIR/dtrain" --addr "$addr" "$@"; }
dtr --tls-ca "$tls/ca.pem" --token-file "$DT_TEST_TMP/token" cluster --timeout 5 >/dev/null ||
  dt_fail "TLS + token client"
set +e
out=$(dtr --tls-ca "$tls/ca.pem" cluster --timeout 5 2>&1)
rc=$?
set -e
[[ $rc -ne 0 ]] || dt_fail "a TLS client without the token was served"
dt_assert_contains "$out" "token" "TLS client without the token"

set +e
out=$(dtr --tls-ca "$tls/other/ca.pem" --token-file "$DT_TEST_TMP/token" cluster --timeout 3 2>&1)
rc=$?
set -e
dt_assert_eq "$rc" 1 "client trusting another CA: exit status"
dt_assert_contains "$out" "certificate failed verification against $tls/other/ca.pem" "client trusting another CA"
dt_stop_daemon srv 5

# A certificate that does not name the address clients dial.
dt_start_daemon far -- --listen "$addr" --tls-cert "$tls/far.pem" --tls-key "$tls/far.key" \
  --state-dir "$DT_TEST_TMP/far" --ready-file "$DT_TEST_TMP/far.ready"
dt_wait_file "$DT_TEST_TMP/far.ready" --timeout 20 || dt_fail "the daemon with far.pem never formed"
set +e
out=$(dtr --tls-ca "$tls/ca.pem" cluster --timeout 3 2>&1)
rc=$?
set -e
dt_assert_eq "$rc" 1 "certificate without the dialed address: exit status"
dt_assert_contains "$out" "certificate does not carry 127.0.0.1 as a subject alternative name" \
  "certificate without the dialed address"
dt_stop_daemon far 5

# A TLS client to a plaintext daemon.
dt_start_daemon plain -- --listen "127.0.0.1:${ports[1]}" --state-dir "$DT_TEST_TMP/plain" \
  --ready-file "$DT_TEST_TMP/plain.ready"
dt_wait_file "$DT_TEST_TMP/plain.ready" --timeout 20 || dt_fail "the plaintext daemon never formed"
set +e
out=$("$DT_BIN_DIR/dtrain" --addr "127.0.0.1:${ports[1]}" --tls-ca "$tls/ca.pem" cluster --timeout 3 2>&1)
rc=$?
set -e
dt_assert_eq "$rc" 1 "TLS client to a plaintext daemon: exit status"
dt_assert_contains "$out" "does not speak TLS" "TLS client to a plaintext daemon"
dt_stop_daemon plain 5

#!/usr/bin/env bash
# timeout: 90
# Two hosts in their own network namespaces with mutual TLS and no token (mutual TLS stands in
# for the token off loopback): certificates name each host's own address, the cluster forms,
# a verified all-reduce crosses the hosts over TLS, and a client without a certificate is refused.
source "$(dirname "$0")/lib.sh"
dt_require_cmd openssl
dt_netns_up 2
a0=$(dt_netns_addr 0) a1=$(dt_netns_addr 1)
addrs=("$a0:7081" "$a1:7081")
tls=$DT_TEST_TMP/tls
"$DT_SRC_DIR/scripts/gen-tls.sh" -o "$tls" "h0=$a0" "h1=$a1" admin >/dev/null
for i in 0 1; do
  dt_bg "h$i" "$DT_NETNS" exec "$i" env TF_CONFIG="$(dt_tfconfig_workers "$i" "${addrs[@]}")" \
    "$DT_BIN_DIR/dtraind" --tls-cert "$tls/h$i.pem" --tls-key "$tls/h$i.key" --tls-ca "$tls/ca.pem" \
    --state-dir "$DT_TEST_TMP/h$i" --ready-file "$DT_TEST_TMP/h$i.ready"
done
for i in 0 1; do dt_wait_file "$DT_TEST_TMP/h$i.ready" --timeout 20 || dt_fail "host $i never formed"; done
dt_assert_contains "$DT_TEST_TMP/h0.log" "serving $a0:7081 .*TLS mutual" "host 0 serves mutual TLS"

"$DT_NETNS" exec 1 "$DT_BIN_DIR/dtrain" --tls-ca "$tls/ca.pem" --tls-cert "$tls/admin.pem" \
  --tls-key "$tls/admin.key" bench allreduce --addr "${addrs[0]}" --verify --sizes 4K,1M --iters 2 \
  --json >"$DT_TEST_TMP/ar.json" || dt_fail "all-reduce across the hosts over TLS"
dt_assert_eq "$(dt_json_get rows.1.verified "$DT_TEST_TMP/ar.json")" true "1M row verified"

if "$DT_NETNS" exec 1 "$DT_BIN_DIR/dtrain" --tls-ca "$tls/ca.pem" cluster --addr "${addrs[0]}" \
  --timeout 3 >"$DT_TEST_TMP/nocert" 2>&1; then
  dt_fail "a client without a certificate was served"
fi
dt_assert_contains "$DT_TEST_TMP/nocert" "TLS handshake with ${addrs[0]} failed" "client without a certificate"

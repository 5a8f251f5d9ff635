#!/usr/bin/env bash
# timeout: 60
# config/systemd: `systemd-analyze verify` accepts dtraind.service without a single complaint (it
# exits 0 even on unknown keys, so its output must be empty), the offline security review rates the
# unit's exposure "OK" or better, and sysusers.d creates the dtrain user in a scratch root.
source "$(dirname "$0")/lib.sh"
dt_require_cmd systemd-analyze
UNIT=$DT_SRC_DIR/config/systemd/dtraind.service
SYSUSERS=$DT_SRC_DIR/config/systemd/dtrain.sysusers.conf
[[ -f $UNIT ]] || dt_fail "no unit at $UNIT"

# verify needs ExecStart's binary: point it at the built daemon, or at a stub before `make`.
daemon=$DT_BIN_DIR/dtraind
if [[ ! -x $daemon ]]; then
  daemon=$DT_TEST_TMP/stub-dtraind
  printf '#!/bin/sh\nexit 0\n' >"$daemon"
  chmod +x "$daemon"
fi
mkdir -p "$DT_TEST_TMP/units"
sed "s|^ExecStart=/usr/local/bin/dtraind |ExecStart=$daemon |" "$UNIT" >"$DT_TEST_TMP/units/dtraind.service"
dt_assert_contains "$DT_TEST_TMP/units/dtraind.service" "^ExecStart=$daemon --tf-config /etc/dtrain/tf_config.json" "rewritten ExecStart"

# verify_unit FILE: run verify from the unit's directory; the output goes to FILE.out.
verify_unit() {
  (cd "$(dirname "$1")" && systemd-analyze verify --man=no --generators=no "$1") >"$1.out" 2>&1
}
rc=0
verify_unit "$DT_TEST_TMP/units/dtraind.service" || rc=$?
cat "$DT_TEST_TMP/units/dtraind.service.out"
dt_assert_eq "$rc" 0 "systemd-analyze verify exit status"
if [[ -s $DT_TEST_TMP/units/dtraind.service.out ]]; then
  dt_fail "systemd-analyze verify complained about dtraind.service (output above)"
fi

# The check has teeth: a misspelt key and a bad Type= are reported.
sed -e 's/^ProtectSystem=/ProtectSystm=/' -e 's/^Type=notify/Type=notifyy/' \
  "$DT_TEST_TMP/units/dtraind.service" >"$DT_TEST_TMP/units/broken.service"
verify_unit "$DT_TEST_TMP/units/broken.service" || true
dt_assert_contains "$DT_TEST_TMP/units/broken.service.out" "Unknown key .ProtectSystm" "verify reports an unknown key"
dt_assert_contains "$DT_TEST_TMP/units/broken.service.out" "notifyy" "verify reports a bad Type="

# The contract of the unit, line by line.
for want in "^Type=notify$" "^Restart=on-failure$" "^User=dtrain$" "^StateDirectory=dtrain$" \
  "^NoNewPrivileges=yes$" "^ProtectSystem=strict$" "^ProtectHome=yes$" "^PrivateTmp=yes$" \
  "^PrivateDevices=no$" "^CapabilityBoundingSet=$" "^RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX" \
  "^LimitNOFILE=[0-9]+$" "^TimeoutStopSec=" "^EnvironmentFile=-"; do
  dt_assert_contains "$UNIT" "$want" "dtraind.service"
done
if grep -E -q "^WatchdogSec=" "$UNIT"; then dt_fail "WatchdogSec= set, but dtraind sends no watchdog pings"; fi

# Offline security review: "OK" (exposure < 5.0 on systemd's 0..10 scale) or better.
if systemd-analyze security --help 2>&1 | grep -q -- --offline; then
  rc=0
  (cd "$DT_TEST_TMP/units" && systemd-analyze security --offline=yes --threshold=49 dtraind.service) \
    >"$DT_TEST_TMP/security.out" 2>&1 || rc=$?
  grep "Overall exposure" "$DT_TEST_TMP/security.out" || true
  dt_assert_eq "$rc" 0 "systemd-analyze security --threshold=49 (exposure must stay under 4.9)"
fi

# sysusers.d: creates user and group dtrain in a scratch root.
if command -v systemd-sysusers >/dev/null; then
  mkdir -p "$DT_TEST_TMP/root/etc"
  systemd-sysusers --root="$DT_TEST_TMP/root" "$SYSUSERS" >"$DT_TEST_TMP/sysusers.out" 2>&1 ||
    dt_fail "systemd-sysusers rejected $SYSUSERS: $(cat "$DT_TEST_TMP/sysusers.out")"
  dt_assert_contains "$DT_TEST_TMP/root/etc/passwd" "^dtrain:x:[0-9]+:[0-9]+:.*:/var/lib/dtrain:/usr/sbin/nologin$" "sysusers passwd entry"
  dt_assert_contains "$DT_TEST_TMP/root/etc/group" "^dtrain:x:[0-9]+:" "sysusers group entry"
fi
echo "systemd unit OK"

#!/usr/bin/env bash
# netns-cluster.sh - a test bed of N "hosts", each its own Linux network namespace.
#
#   netns-cluster.sh up N [RATE]    create hosts 0..N-1 (N <= 64) and check they reach each other
#   netns-cluster.sh down           remove everything (idempotent; exit 0 when already down)
#   netns-cluster.sh exec I CMD...  run CMD inside host I's namespace
#   netns-cluster.sh addr I         print host I's IPv4 address
#   netns-cluster.sh status         print the hosts, addresses and qdiscs; exit 1 when down
#
# Environment:
#   DT_NETNS_PREFIX  name prefix of every resource (default "dt"); use one per parallel test run
#   DT_NETNS_SUBNET  first three octets of the /24 (default "10.77.0"); host i gets .(i+1)
#   DT_NETNS_DELAY   one-way delay added to each host's egress with netem (e.g. "1ms")
#
# Layout (nothing is created in the caller's namespace, so nothing can leak into the host's
# network and two test beds with different prefixes never see each other, even with one subnet):
#
#   netns PREFIX-br:  bridge br0 with ports h0..h{N-1}
#   netns PREFIX-hI:  eth0 = 10.77.0.(I+1)/24 (the peer of port hI), lo up
#
# RATE (e.g. 1gbit, 100mbit, 500kbit) shapes each host's egress on eth0 with a token bucket (tbf),
# so every flow crosses exactly one shaper, at its sender. `down` finds every resource by its name:
# the namespaces PREFIX-br and PREFIX-hI; veths and the bridge die with their namespaces, and
# processes still running inside them are killed first.
set -euo pipefail

PREFIX=${DT_NETNS_PREFIX:-dt}
SUBNET=${DT_NETNS_SUBNET:-10.77.0}
DELAY=${DT_NETNS_DELAY:-}
MAX_HOSTS=64

die() {
  echo "netns-cluster: $*" >&2
  exit 1
}

usage() {
  sed -n '2,8s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

[[ $PREFIX =~ ^[A-Za-z0-9][A-Za-z0-9_]{0,19}$ ]] ||
  die "DT_NETNS_PREFIX='$PREFIX' is not valid: use 1-20 letters, digits or '_'"

br_ns() { echo "$PREFIX-br"; }
host_ns() { echo "$PREFIX-h$1"; }

# The namespaces of this test bed, one per line (bridge first, then hosts by index).
list_ns() {
  ip netns list 2>/dev/null | awk '{print $1}' |
    grep -E "^${PREFIX}-(br|h[0-9]+)$" | sort -V || true
}

host_count() {
  list_ns | grep -c -E "^${PREFIX}-h[0-9]+$" || true
}

need_tools() {
  [[ $(id -u) -eq 0 ]] || die "must run as root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
  command -v ip >/dev/null || die "'ip' not found: apt-get install iproute2"
}

# RATE -> bits per second. Units as tc(8) reads them: bit, kbit, mbit, gbit (powers of 1000).
rate_bps() {
  local r=${1,,}
  [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "RATE '$1' not understood: use e.g. 1gbit, 100mbit, 500kbit"
  local n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
  case $u in
  bit) echo $((n)) ;;
  kbit) echo $((n * 1000)) ;;
  mbit) echo $((n * 1000000)) ;;
  gbit) echo $((n * 1000000000)) ;;
  esac
}

# Egress shaping of one host's eth0.
#   tbf rate R burst B latency 20ms:
#   - burst B = 4 ms worth of R, at least 64 KiB. It must hold one GSO super-packet (up to 64 KiB,
#     veth has TSO on and we have no ethtool to turn it off) or tbf has to split every one; 4 ms
#     keeps the rate steady when a busy 2-core VM wakes the qdisc late. A flow of 20 MB sees at
#     most B above the rate (500 KB at 1gbit, 2.5%).
#   - latency 20ms bounds the queue (limit = R * 20 ms + B); more only adds bufferbloat.
#   With DT_NETNS_DELAY, netem is the root (handle 1:) and tbf its child (parent 1:1), the
#   arrangement tc-netem(8) documents for delay + rate: netem holds each packet for the delay,
#   then hands it to tbf. netem's limit is raised to 10000 packets (default 1000) so a fast link
#   with delay does not drop.
shape_host() {
  local ns=$1 rate=$2 delay=$3 bps burst parent=root
  if [[ -n $delay ]]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "$delay" limit 10000 ||
      die "tc netem failed in $ns (DT_NETNS_DELAY='$delay'); 'Specified qdisc kind is unknown' means this kernel lacks sch_netem: unset DT_NETNS_DELAY"
    parent="parent 1:1"
  fi
  if [[ -n $rate ]]; then
    bps=$(rate_bps "$rate")
    burst=$((bps / 8 / 250))
    ((burst >= 65536)) || burst=65536
    # shellcheck disable=SC2086  # $parent is "root" or "parent 1:1"
    ip netns exec "$ns" tc qdisc add dev eth0 $parent handle 10: tbf rate "$bps" burst "$burst" latency 20ms ||
      die "tc tbf failed in $ns (RATE='$rate')"
  fi
}

# Is ADDR reachable from namespace NS? A TCP connect to the discard port either succeeds or is
# refused (RST) when the host is there; "No route to host" (ARP failed) or a timeout means it is not.
# No ping needed: iputils-ping is often missing and ICMP sockets may be restricted.
probe() {
  local ns=$1 addr=$2 out
  out=$(ip netns exec "$ns" timeout 3 bash -c "exec 3<>/dev/tcp/$addr/9" 2>&1) && return 0
  [[ $out == *"refused"* ]]
}

cmd_up() {
  local n=${1:-} rate=${2:-}
  # shellcheck disable=SC2015  # either test failing means a bad N
  [[ $n =~ ^[0-9]{1,3}$ ]] && ((10#$n >= 1 && n <= MAX_HOSTS)) || die "up: N must be 1..$MAX_HOSTS, got '${n}'"
  need_tools
  [[ -z $rate ]] || rate_bps "$rate" >/dev/null
  if [[ -n $rate || -n $DELAY ]]; then
    command -v tc >/dev/null || die "'tc' not found: apt-get install iproute2"
  fi
  [[ -z $DELAY || $DELAY =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] ||
    die "DT_NETNS_DELAY='$DELAY' not understood: use e.g. 1ms, 500us"
  # shellcheck disable=SC2015
  [[ $SUBNET =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] &&
    ((BASH_REMATCH[1] <= 255 && BASH_REMATCH[2] <= 255 && BASH_REMATCH[3] <= 255)) ||
    die "DT_NETNS_SUBNET='$SUBNET' is not three octets like 10.77.0"
  if [[ -n $(list_ns) ]]; then
    die "already up: namespaces $(list_ns | tr '\n' ' ')exist; run '$0 down' (DT_NETNS_PREFIX=$PREFIX) first"
  fi

  # From here on, any failure (set -e or die) takes down what was built, on the way out.
  trap 'rc=$?; if ((rc)); then echo "netns-cluster: up failed; removing the partial test bed" >&2; cmd_down >/dev/null 2>&1 || true; fi' EXIT
  local br i ns
  br=$(br_ns)
  ip netns add "$br"
  ip -n "$br" link set lo up
  ip -n "$br" link add br0 type bridge forward_delay 0 stp_state 0
  ip -n "$br" link set br0 up
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Created inside the bridge namespace; the peer goes straight into the host's namespace.
    ip -n "$br" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$br" link set "h$i" master br0 up
    ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [[ -n $rate || -n $DELAY ]]; then
      shape_host "$ns" "$rate" "$DELAY"
    fi
  done

  # Every host must reach every other one before we say "up".
  local j bad=()
  for ((i = 0; i < n; i++)); do
    for ((j = 0; j < n; j++)); do
      ((i == j)) && continue
      probe "$(host_ns "$i")" "$SUBNET.$((j + 1))" || bad+=("h$i->h$j")
    done
  done
  ((${#bad[@]} == 0)) || die "up: hosts cannot reach each other (${bad[*]})"
  trap - EXIT
  echo "netns-cluster: $n hosts up (prefix $PREFIX, subnet $SUBNET.0/24${rate:+, egress $rate}${DELAY:+, delay $DELAY})"
  for ((i = 0; i < n; i++)); do
    echo "  host $i: netns $(host_ns "$i")  addr $SUBNET.$((i + 1))"
  done
}

cmd_down() {
  local ns pids rc=0
  # Already down (or never up: no `ip`, nothing named with the prefix) is success, root or not.
  command -v ip >/dev/null || return 0
  [[ -n $(list_ns) ]] || return 0
  [[ $(id -u) -eq 0 ]] || die "must run as root to remove $(list_ns | tr '\n' ' ')"
  for ns in $(list_ns); do
    # Processes left inside (listeners, daemons) would keep the namespace alive unnamed.
    pids=$(ip netns pids "$ns" 2>/dev/null | grep -v -x -e "$$" || true)
    if [[ -n $pids ]]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns" 2>/dev/null | grep -v -x -e "$$" || true)
        [[ -z $pids ]] && break
        sleep 0.1
      done
      # shellcheck disable=SC2086
      [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || [[ ! -e /run/netns/$ns ]] || {
      echo "netns-cluster: could not delete namespace $ns" >&2
      rc=1
    }
  done
  return $rc
}

# Host index -> namespace, checking that it exists.
ns_of() {
  local i=${1:-}
  [[ $i =~ ^[0-9]+$ ]] || die "host index must be a number, got '$i'"
  local ns
  ns=$(host_ns "$i")
  [[ -e /run/netns/$ns ]] || die "host $i is not up (no namespace $ns; prefix $PREFIX)"
  echo "$ns"
}

host_addr() {
  local a
  a=$(ip -n "$1" -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1 | head -n1)
  [[ -n $a ]] || die "no IPv4 address on eth0 in $1"
  echo "$a"
}

cmd_status() {
  local n i ns
  n=$(host_count)
  if ((n == 0)); then
    echo "netns-cluster: down (prefix $PREFIX)"
    return 1
  fi
  echo "netns-cluster: $n hosts up (prefix $PREFIX)"
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i")
    printf '  host %d: netns %s  addr %s  qdisc: %s\n' "$i" "$ns" "$(host_addr "$ns")" \
      "$(ip netns exec "$ns" tc qdisc show dev eth0 2>/dev/null | tr '\n' ';' | sed 's/;$//')"
  done
}

case ${1:-} in
up)
  shift
  cmd_up "$@"
  ;;
down)
  cmd_down
  ;;
exec)
  shift
  need_tools
  [[ $# -ge 2 ]] || usage
  ns=$(ns_of "$1")
  shift
  exec ip netns exec "$ns" "$@"
  ;;
addr)
  [[ $# -eq 2 ]] || usage
  host_addr "$(ns_of "$2")"
  ;;
status)
  cmd_status
  ;;
*) usage ;;
esac

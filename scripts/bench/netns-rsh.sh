#!/usr/bin/env bash
# netns-rsh.sh HOST CMD... - OpenMPI's launch agent (plm_rsh_agent) for scripts/netns-cluster.sh
# hosts: where mpirun would ssh to HOST, run CMD in HOST's network namespace instead.
# HOST is a test-bed address (SUBNET.(I+1) -> namespace PREFIX-hI, the layout netns-cluster.sh
# makes), with DT_NETNS_PREFIX / DT_NETNS_SUBNET as mpirun's environment passed them down.
# OpenMPI hands the remote command as one shell string, as ssh would, so it runs under sh -c.
set -euo pipefail
PREFIX=${DT_NETNS_PREFIX:-dt}
SUBNET=${DT_NETNS_SUBNET:-10.77.0}
# ssh-style options before the host (OpenMPI passes none by default; skip any it adds).
while [[ ${1:-} == -* ]]; do shift; done
host=${1:?usage: netns-rsh.sh HOST CMD...}
shift
[[ $host == "$SUBNET".* ]] || { echo "netns-rsh: host '$host' is not in $SUBNET.0/24" >&2; exit 255; }
i=$((${host##*.} - 1))
ns=$PREFIX-h$i
[[ -e /run/netns/$ns ]] || { echo "netns-rsh: no namespace $ns for host $host" >&2; exit 255; }
exec ip netns exec "$ns" sh -c "$*"

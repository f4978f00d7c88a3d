#!/usr/bin/env bash
# cluster.sh — emulated nodes on this machine: network namespaces with their own hostnames,
# joined by (optionally rate-shaped) veth links, and the mpirun arguments that launch into them.
#
#   jobs/local/cluster.sh up [--nodes N] [--rate 10gbit] [--slots S] [--prefix NAME] [--subnet A.B.C]
#   jobs/local/cluster.sh down [--prefix NAME]
#   jobs/local/cluster.sh status [--prefix NAME]
#
# Every node is a namespace of its own, node 0 included: all nodes are alike (same link, same
# shaping, a hostname that is not this machine's), and no rank traffic ever touches the root
# namespace's interfaces. The root namespace only holds the bridge (the "switch", address .254)
# so that mpirun, which runs here, reaches the daemons over the private subnet.
#
# Node i is "<prefix>-node<i>": network namespace /run/netns/<prefix>-node<i>, UTS namespace
# bound at /run/ringtrain-cluster/<prefix>/uts/<prefix>-node<i>, interface eth0 = <subnet>.<i+1>/24,
# linked by veth <prefix>-v<i> to bridge <prefix>-br. `up` writes into /run/ringtrain-cluster/<prefix>/
#   hostfile     one line per node, "slots=S"
#   agent        the rsh agent: `agent HOST COMMAND...` runs COMMAND in node HOST, exits with its status
#   mpirun.env   sourceable: RT_CLUSTER_MPIRUN_ARGS (hostfile, agent, if_include), RT_CLUSTER_HOSTS, ...
# and prints the mpirun arguments. `down` removes all of it, found from the state files and by
# prefix (so also after a crash), and is idempotent. Exit 2 without root or namespaces.
set -euo pipefail
STATE_ROOT=/run/ringtrain-cluster
me=cluster.sh
die() { echo "$me: error: $*" >&2; exit 2; }
usage() { sed -n '5,7p' "$0" | sed 's/^# *//' >&2; exit 2; }

action=${1:-}; [ $# -gt 0 ] && shift
nodes=2 rate=none slots=2 prefix=${RT_CLUSTER:-rtc} subnet=auto
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --slots) slots=${2:?}; shift 2 ;;
    --prefix) prefix=${2:?}; shift 2 ;;
    --subnet) subnet=${2:?}; shift 2 ;;
    --nodes=* | --rate=* | --slots=* | --prefix=* | --subnet=*)
      set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    *) echo "$me: error: unknown argument '$1'" >&2; usage ;;
  esac
done
case $action in up | down | status) ;; *) usage ;; esac
# Interface names are at most 15 bytes: "<prefix>-v<i>" must fit.
[[ $prefix =~ ^[a-z][a-z0-9]{0,8}$ ]] || die "--prefix '$prefix': use 1-9 lower-case letters or digits, starting with a letter"
[[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 64 ] || die "--nodes '$nodes': use 1 to 64"
[[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "--slots '$slots': use a positive count"
state=$STATE_ROOT/$prefix
bridge=$prefix-br

# The one-line refusal tests turn into a skip: no root, or the kernel or container forbids it.
check_permitted() {
  [ "$(id -u)" = 0 ] || { echo "$me: needs root to create network namespaces (uid $(id -u))"; exit 2; }
  local tool
  for tool in ip tc nsenter unshare; do
    command -v "$tool" >/dev/null || { echo "$me: '$tool' is not installed"; exit 2; }
  done
  unshare --net --uts true 2>/dev/null || { echo "$me: network/UTS namespaces are not permitted here"; exit 2; }
  # Root in a user namespace may make namespaces but no links in this one: try one.
  ip link add "$prefix-pr" type bridge 2>/dev/null || { echo "$me: cannot create network links here (no CAP_NET_ADMIN in this namespace)"; exit 2; }
  ip link del "$prefix-pr"
  mkdir -p "$STATE_ROOT" 2>/dev/null && [ -w "$STATE_ROOT" ] || { echo "$me: cannot write $STATE_ROOT"; exit 2; }
}

# Serialises up and down across concurrent callers (two test runs picking subnets).
take_lock() { mkdir -p "$STATE_ROOT"; exec 9>"$STATE_ROOT/.lock"; flock -w 60 9 || die "$STATE_ROOT/.lock is held"; }

node_name() { echo "$prefix-node$1"; }

# Leftovers by prefix: namespaces, links and UTS bind mounts, whether or not state files exist.
leftover_netns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-node[0-9]+\$" || true; }
leftover_links() { ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^$prefix-(br|v[0-9]+)\$" || true; }
leftover_mounts() { awk -v d="$state/uts/" 'index($2, d) == 1 {print $2}' /proc/self/mounts; }

# A /24 not routed here yet: 10.213.0/24, 10.213.1/24, ...
pick_subnet() {
  local c
  for c in $(seq 0 254); do
    ip route show | grep "^10\.213\.$c\.0/24 " >/dev/null || { echo "10.213.$c"; return; }
  done
  die "no free 10.213.X.0/24 subnet left"
}

# tbf needs a bucket of at least one GSO packet (64 KiB) and about one timer tick of traffic.
tbf_burst() {
  local r=$1 n unit bits
  [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "--rate '$r': use a number with bit, kbit, mbit or gbit (e.g. 10gbit), or none"
  n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case $unit in bit) bits=$n ;; kbit) bits=$((n * 1000)) ;; mbit) bits=$((n * 1000000)) ;; gbit) bits=$((n * 1000000000)) ;; esac
  local burst=$((bits / 8 / 250))
  [ "$burst" -ge 131072 ] || burst=131072
  echo "$burst"
}

shape() {  # shape NETNS_OR_EMPTY DEV: egress of DEV limited to $rate
  local ns=$1 dev=$2 burst
  burst=$(tbf_burst "$rate")
  if [ -n "$ns" ]; then
    ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
  else
    tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
  fi
}

write_agent() {
  local orted_dir
  orted_dir=$(dirname "$(command -v orted || echo /usr/bin/orted)")
  cat >"$state/agent" <<AGENT
#!/bin/sh
# agent — OpenMPI's rsh agent for the emulated cluster '$prefix': \`agent HOST COMMAND...\` runs
# COMMAND (one shell command line, as ssh would) inside node HOST, in the caller's environment,
# and exits with its status (255 when HOST is not a node, as ssh does).
host=\$1
shift
case \$host in $prefix-node[0-9]*) ;; *) echo "agent: '\$host' is not a node of cluster '$prefix'" >&2; exit 255 ;; esac
[ -e "/run/netns/\$host" ] && [ -e "$state/uts/\$host" ] || { echo "agent: node '\$host' is down" >&2; exit 255; }
PATH=\$PATH:$orted_dir
export PATH
exec nsenter --net="/run/netns/\$host" --uts="$state/uts/\$host" -- /bin/sh -c "\$*"
AGENT
  chmod 755 "$state/agent"
}

write_env() {
  local sub=$1 hosts=() i
  for i in $(seq 0 $((nodes - 1))); do hosts+=("$(node_name "$i")"); done
  local args="--hostfile $state/hostfile --mca plm_rsh_agent $state/agent --mca plm_rsh_no_tree_spawn 1"
  args+=" --mca btl_tcp_if_include $sub.0/24 --mca oob_tcp_if_include $sub.0/24"
  # The nodes share this machine's cores, but each node's mpirun daemon believes it has them
  # all: busy-polling ranks then starve each other (a 2 x 2 ring test ran 6x slower). Yield.
  args+=" --mca mpi_yield_when_idle 1"
  cat >"$state/mpirun.env" <<ENV
# mpirun.env — written by jobs/local/cluster.sh up; source it to launch into cluster '$prefix'.
RT_CLUSTER_PREFIX=$prefix
RT_CLUSTER_NODES=$nodes
RT_CLUSTER_SLOTS=$slots
RT_CLUSTER_HOSTS="${hosts[*]}"
RT_CLUSTER_SUBNET=$sub.0/24
RT_CLUSTER_RATE=$rate
RT_CLUSTER_HOSTFILE=$state/hostfile
RT_CLUSTER_AGENT=$state/agent
RT_CLUSTER_MPIRUN_ARGS="$args"
ENV
}

do_up() {
  check_permitted
  take_lock
  [ "$rate" = none ] || tbf_burst "$rate" >/dev/null
  if [ -e "$state/mpirun.env" ] || [ -n "$(leftover_netns)$(leftover_links)" ]; then
    die "cluster '$prefix' already exists (or left over from a crash); run 'jobs/local/cluster.sh down --prefix $prefix' first"
  fi
  local sub=$subnet
  [ "$sub" = auto ] && sub=$(pick_subnet)
  [[ $sub =~ ^10\.[0-9]+\.[0-9]+$ ]] || die "--subnet '$sub': give the first three numbers of a private 10.x.y.0/24"
  ip route show | grep "^${sub//./\\.}\.0/24 " >/dev/null && die "--subnet $sub.0/24 is already routed here (ip route); pick another"
  mkdir -p "$state/uts"
  echo "$sub" >"$state/subnet"
  # From here on a failure removes what was made.
  trap 'echo "$me: up failed; removing what it made" >&2; do_down_locked >/dev/null 2>&1' ERR
  ip link add "$bridge" type bridge
  ip addr add "$sub.254/24" dev "$bridge"
  ip link set "$bridge" up
  : >"$state/hostfile"
  local i node
  for i in $(seq 0 $((nodes - 1))); do
    node=$(node_name "$i")
    ip netns add "$node"
    touch "$state/uts/$node"
    unshare --uts="$state/uts/$node" hostname "$node"
    ip link add "$prefix-v$i" type veth peer name "$prefix-p$i"
    ip link set "$prefix-p$i" netns "$node"
    ip -n "$node" link set "$prefix-p$i" name eth0
    ip -n "$node" addr add "$sub.$((i + 1))/24" dev eth0
    ip -n "$node" link set lo up
    ip -n "$node" link set eth0 up
    ip link set "$prefix-v$i" master "$bridge"
    ip link set "$prefix-v$i" up
    if [ "$rate" != none ]; then
      shape "" "$prefix-v$i"   # towards the node
      shape "$node" eth0       # from the node
    fi
    echo "$node slots=$slots" >>"$state/hostfile"
  done
  write_agent
  write_env "$sub"
  trap - ERR
  # A bounded check that each node is up (and answers ping where ping is installed).
  for i in $(seq 0 $((nodes - 1))); do
    node=$(node_name "$i")
    [ "$("$state/agent" "$node" hostname)" = "$node" ] || die "node $node does not report its hostname"
    if command -v ping >/dev/null; then
      ping -c 1 -W 2 "$sub.$((i + 1))" >/dev/null 2>&1 || die "node $node ($sub.$((i + 1))) does not answer ping"
    fi
  done
  echo "cluster '$prefix' up: $nodes node(s) ${prefix}-node0..$((nodes - 1)) on $sub.0/24, rate $rate, $slots slot(s) each"
  print_usage
}

print_usage() {
  # shellcheck disable=SC1091
  source "$state/mpirun.env"
  echo "mpirun arguments (also RT_CLUSTER_MPIRUN_ARGS in $state/mpirun.env):"
  echo "  $RT_CLUSTER_MPIRUN_ARGS"
  echo "e.g.: mpirun $RT_CLUSTER_MPIRUN_ARGS --map-by ppr:1:node -np $nodes hostname"
}

kill_node_processes() {  # processes still inside a node (a crashed job's daemons): TERM, then KILL
  local node=$1 pids try
  for try in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(ip netns pids "$node" 2>/dev/null || true)
    [ -n "$pids" ] || return 0
    if [ "$try" -lt 6 ]; then kill -TERM $pids 2>/dev/null || true; else kill -KILL $pids 2>/dev/null || true; fi
    sleep 0.5
  done
  echo "$me: processes $pids in $node did not stop" >&2
}

do_down_locked() {
  local node link mnt removed=0
  for node in $(leftover_netns); do
    kill_node_processes "$node"
    ip netns del "$node" && removed=$((removed + 1))
  done
  for link in $(leftover_links); do ip link del "$link" 2>/dev/null || true; done
  for mnt in $(leftover_mounts); do umount "$mnt" 2>/dev/null || umount -l "$mnt" || true; done
  rm -rf "$state"
  echo "cluster '$prefix' down: removed $removed node(s)"
}

do_down() {
  [ "$(id -u)" = 0 ] || { echo "$me: needs root to remove network namespaces (uid $(id -u))"; exit 2; }
  take_lock
  do_down_locked
}

do_status() {
  local ns links mounts
  ns=$(leftover_netns | tr '\n' ' ') links=$(leftover_links | tr '\n' ' ') mounts=$(leftover_mounts | wc -l)
  if [ -e "$state/mpirun.env" ]; then
    # shellcheck disable=SC1091
    source "$state/mpirun.env"
    echo "cluster '$prefix': $RT_CLUSTER_NODES node(s) on $RT_CLUSTER_SUBNET, rate $RT_CLUSTER_RATE, $RT_CLUSTER_SLOTS slot(s) each"
    local node
    for node in $RT_CLUSTER_HOSTS; do
      if [ -e "/run/netns/$node" ]; then
        echo "  $node: up, hostname $("$state/agent" "$node" hostname), $(ip -n "$node" -o -4 addr show dev eth0 | awk '{print $4}'), $(ip netns pids "$node" | wc -l) process(es)"
      else
        echo "  $node: MISSING"
      fi
    done
    print_usage
  elif [ -n "$ns$links" ] || [ "$mounts" != 0 ]; then
    echo "cluster '$prefix': leftovers without state files (namespaces: ${ns:-none}; links: ${links:-none}; $mounts mount(s)); run down"
  else
    echo "cluster '$prefix': not up"
    local others
    others=$(ls "$STATE_ROOT" 2>/dev/null | tr '\n' ' ')
    [ -z "$others" ] || echo "other clusters: $others"
  fi
}

"do_$action"

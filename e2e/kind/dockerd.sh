#!/usr/bin/env bash
# A docker daemon for the offline kind cluster, started behind a network guard (docs/tasks/e2e.md "The offline kind cluster", COMMON network rule).
#
# Usage: e2e/kind/dockerd.sh start   install docker.io/iptables/nftables from Debian if missing, apply the
#                                    guard, start dockerd (no-op when ours runs), verify with `check`
#        e2e/kind/dockerd.sh check   verify the guard and the daemon; exit 1 naming every missing piece
#        e2e/kind/dockerd.sh guard   apply the guard only (sysctls + nftables table); idempotent
#        e2e/kind/dockerd.sh stop    stop the daemon this script started (the guard stays)
#        e2e/kind/dockerd.sh counters  print the guard's packet counters (dropped/leaving), one per line
#
# The guard, in place BEFORE dockerd (and so before any container) starts:
#   - net.ipv4.ip_forward = 0 and net.ipv6.conf.all.forwarding = 0, read back and verified;
#   - nftables table `inet $ACCELPOLICY_GUARD_TABLE` (default accelpolicy_guard):
#       forward hook (priority -300, ahead of docker's own chains): a packet arriving on a docker bridge
#         (docker0, br-*) and leaving by any interface that is not a docker bridge is counted and dropped,
#         and so is a packet from any other interface to a docker bridge;
#       postrouting hook: a packet with a container source address (172.16.0.0/12, fc00::/7), or addressed to
#         the clusters' Service or Pod range (10.96.0.0/12, 10.244.0.0/16), leaving by an interface that is
#         not a docker bridge or loopback is counted and dropped.
#   dockerd runs with --ip-forward=false, --iptables=true, every network inside 172.18.0.0/16, no
#   registry mirrors (an empty config file of our own), HTTP(S)_PROXY pointed at 127.0.0.1:9 so a pull can
#   only fail locally, and its data root in $ACCELPOLICY_CACHE/docker (outside the clone).
#
# The docker socket is the default /var/run/docker.sock, so `docker` and kind need no DOCKER_HOST.
# Overrides (tests use them to prove refusal): ACCELPOLICY_GUARD_TABLE, ACCELPOLICY_IP_FORWARD_FILE.
set -euo pipefail

cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
table="${ACCELPOLICY_GUARD_TABLE:-accelpolicy_guard}"
ipv4_forward_file="${ACCELPOLICY_IP_FORWARD_FILE:-/proc/sys/net/ipv4/ip_forward}"
ipv6_forward_file=/proc/sys/net/ipv6/conf/all/forwarding
root="$cache/docker"
pidfile=/run/accelpolicy-dockerd.pid
socket=/var/run/docker.sock
address_pool="172.18.0.0/16"
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

say() { echo "dockerd.sh: $*"; }

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v nft >/dev/null || missing+=(nftables)
  command -v iptables >/dev/null || missing+=(iptables)
  ((${#missing[@]} == 0)) && return 0
  say "installing ${missing[*]} from Debian's packages (services are not started by apt)"
  # Without a policy-rc.d, apt's postinst would start dockerd with Debian's defaults (forwarding on).
  local own_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; own_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; }
  ((own_policy)) && rm -f /usr/sbin/policy-rc.d
  return 0
}

apply_guard() {
  sysctl -q -w net.ipv4.ip_forward=0
  sysctl -q -w net.ipv6.conf.all.forwarding=0
  # One atomic transaction: create-if-missing, delete, re-create, so re-running resets to exactly this.
  nft -f - <<EOF
table inet $table
delete table inet $table
table inet $table {
  chain forward {
    type filter hook forward priority -300; policy accept;
    iifname "docker0" oifname != "docker0" oifname != "br-*" counter drop comment "forward docker0 to another interface"
    iifname "br-*" oifname != "docker0" oifname != "br-*" counter drop comment "forward br-* to another interface"
    oifname "docker0" iifname != "docker0" iifname != "br-*" counter drop comment "forward another interface to docker0"
    oifname "br-*" iifname != "docker0" iifname != "br-*" counter drop comment "forward another interface to br-*"
  }
  chain postrouting {
    type filter hook postrouting priority -300; policy accept;
    oifname != "lo" oifname != "docker0" oifname != "br-*" oifname != "veth*" ip saddr 172.16.0.0/12 counter drop comment "IPv4 container address leaving the machine"
    oifname != "lo" oifname != "docker0" oifname != "br-*" oifname != "veth*" ip6 saddr fc00::/7 counter drop comment "IPv6 container address leaving the machine"
    oifname != "lo" oifname != "docker0" oifname != "br-*" oifname != "veth*" ip daddr { 10.96.0.0/12, 10.244.0.0/16 } counter drop comment "cluster Service/Pod range leaving the machine"
  }
}
EOF
}

# Prints one line per missing piece of the guard; empty output means the guard is complete.
guard_problems() {
  local v
  v="$(cat "$ipv4_forward_file" 2>/dev/null || echo unreadable)"
  [[ "$v" == 0 ]] || echo "net.ipv4.ip_forward is '$v' in $ipv4_forward_file (must be 0)"
  v="$(cat "$ipv6_forward_file" 2>/dev/null || echo unreadable)"
  [[ "$v" == 0 ]] || echo "net.ipv6.conf.all.forwarding is '$v' (must be 0)"
  if ! command -v nft >/dev/null; then echo "nft not installed (nftables table inet $table cannot exist)"; return; fi
  local listing
  if ! listing="$(nft list table inet "$table" 2>/dev/null)"; then
    echo "nftables table inet $table is missing (forwarded packets from docker bridges are not dropped)"; return
  fi
  local rule
  for rule in 'iifname "docker0" oifname != "docker0" oifname != "br-\*" counter packets [0-9]+ bytes [0-9]+ drop' \
              'iifname "br-\*" oifname != "docker0" oifname != "br-\*" counter packets [0-9]+ bytes [0-9]+ drop' \
              'ip saddr 172.16.0.0/12 counter packets [0-9]+ bytes [0-9]+ drop' \
              'ip6 saddr fc00::/7 counter packets [0-9]+ bytes [0-9]+ drop' \
              'ip daddr \{ 10.96.0.0/12, 10.244.0.0/16 \} counter packets [0-9]+ bytes [0-9]+ drop' \
              'type filter hook forward priority (raw|-300); policy accept;' \
              'type filter hook postrouting priority (raw|-300); policy accept;'; do
    grep -Eq -- "$rule" <<<"$listing" || echo "nftables table inet $table lacks: ${rule//\\/}"
  done
}

dockerd_pid() {  # pid of the dockerd serving $socket that this script started, or nothing
  [[ -s "$pidfile" ]] || return 0
  local pid; pid="$(cat "$pidfile")"
  [[ -r "/proc/$pid/cmdline" ]] || return 0
  local cmdline; cmdline="$(tr '\0' ' ' < "/proc/$pid/cmdline")"
  grep -q '^dockerd\|/dockerd ' <<<"$cmdline" && echo "$pid"
  return 0
}

daemon_problems() {
  local pid; pid="$(dockerd_pid)"
  if [[ -z "$pid" ]]; then
    if pgrep -x dockerd >/dev/null; then echo "a dockerd not started by e2e/kind/dockerd.sh is running (pid $(pgrep -x dockerd | tr '\n' ' ')); its options are unknown"; fi
    echo "dockerd is not running (start it with: bash e2e/kind/dockerd.sh start)"; return
  fi
  local args; args="$(tr '\0' '\n' < "/proc/$pid/cmdline")"
  grep -qx -- '--ip-forward=false' <<<"$args" || echo "dockerd (pid $pid) runs without --ip-forward=false"
  grep -qx -- '--iptables=true' <<<"$args" || echo "dockerd (pid $pid) runs without --iptables=true"
  grep -q -- '--registry-mirror' <<<"$args" && echo "dockerd (pid $pid) has a registry mirror"
  local mirrors
  mirrors="$(docker info --format '{{json .RegistryConfig.Mirrors}}' 2>/dev/null || echo unreachable)"
  [[ "$mirrors" == "null" || "$mirrors" == "[]" ]] || echo "docker info reports registry mirrors: $mirrors"
}

check() {  # $1 = "guard" to skip the daemon checks
  local problems; problems="$(guard_problems)"
  [[ "${1:-}" == guard ]] || problems+="${problems:+$'\n'}$(daemon_problems)"
  problems="$(sed '/^$/d' <<<"$problems")"
  if [[ -n "$problems" ]]; then
    echo "dockerd.sh check: network guard incomplete; refusing:" >&2
    sed 's/^/  - /' <<<"$problems" >&2
    return 1
  fi
  if [[ "${1:-}" == guard ]]; then say "guard present (ip_forward=0, ipv6 forwarding=0, nftables table inet $table)"; return; fi
  say "guard present (ip_forward=0, ipv6 forwarding=0, nftables table inet $table); dockerd pid $(dockerd_pid) runs with --ip-forward=false --iptables=true, no mirrors"
}

start() {
  install_packages
  apply_guard
  check guard
  if [[ -n "$(dockerd_pid)" ]]; then check; return; fi
  if pgrep -x dockerd >/dev/null; then
    echo "dockerd.sh: a dockerd not started by this script is running (pid $(pgrep -x dockerd | tr '\n' ' ')); stop it first" >&2; return 1
  fi
  mkdir -p "$root/data" "$root/exec"
  echo '{}' > "$root/daemon.json"
  say "starting dockerd (data root $root/data, log $root/dockerd.log)"
  # setsid: the daemon outlives this script; the proxy variables make any registry pull fail on loopback.
  HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY= \
    setsid dockerd --config-file "$root/daemon.json" --data-root "$root/data" --exec-root "$root/exec" \
      --pidfile "$pidfile" --host "unix://$socket" --ip-forward=false --iptables=true --ip-masq=true \
      --default-address-pool "base=$address_pool,size=24" --bip 172.18.255.1/24 \
      --storage-driver overlay2 --log-level warn \
      >>"$root/dockerd.log" 2>&1 < /dev/null &
  local i
  for i in $(seq 1 60); do
    docker version >/dev/null 2>&1 && [[ -n "$(dockerd_pid)" ]] && break
    sleep 1
  done
  docker version >/dev/null 2>&1 || { echo "dockerd.sh: dockerd did not answer within 60s; see $root/dockerd.log" >&2; tail -20 "$root/dockerd.log" >&2; return 1; }
  check
}

stop() {
  local pid; pid="$(dockerd_pid)"
  [[ -z "$pid" ]] && { say "no dockerd of ours is running"; return 0; }
  kill "$pid"
  local i; for i in $(seq 1 30); do [[ -d "/proc/$pid" ]] || break; sleep 1; done
  say "dockerd (pid $pid) stopped; the guard stays in place"
}

counters() {
  nft list table inet "$table" | awk '/counter packets/ { for (i=1;i<=NF;i++) if ($i=="packets") p=$(i+1); match($0, /comment "[^"]*"/); print p "\t" substr($0, RSTART+9, RLENGTH-10) }'
}

case "${1:-}" in
  start) start ;;
  check) check ;;
  guard) install_packages; apply_guard; check guard ;;
  stop) stop ;;
  counters) counters ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac

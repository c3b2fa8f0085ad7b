#!/usr/bin/env bash
# A real one-node Slurm cluster for tests and trying perfdag's Slurm executor: munge, slurmctld and
# slurmd as plain background processes (no systemd), two fake GPUs as GRES.
#
#   scripts/slurm-local.sh start|stop|status [DIR]     (DIR: $PERFDAG_SLURM_DIR, else /tmp/perfdag-slurm)
#
# PERFDAG_SLURM_NODES=N (default 1) starts N nodes on this host, <host>-n0..<host>-n<N-1>: one slurmd
# each (`slurmd -N <name>`, its own port, spool, pid file and log), two fake GPUs each. One node keeps
# the host's own name, as before.
#
# Everything it writes (config, state, spool, logs, pid files, munge socket) lives under DIR; clients
# find the cluster through SLURM_CONF=DIR/etc/slurm.conf, printed by `start`. Installs Debian's
# slurm-wlm (munge slurmctld slurmd slurm-client) when missing; needs root (slurmd runs jobs as any
# user, and the cgroup plugins need it). Exit 3: cannot install or start (the reason on stderr).
# No accounting database: squeue/scontrol answer without one, sacct does not. Where crun is installed,
# DIR/etc/oci.conf lets steps run in OCI bundles (srun --container=<bundle>; scripts/oci-bundle.sh).
set -euo pipefail

cmd=${1:-status}
DIR=${2:-${PERFDAG_SLURM_DIR:-/tmp/perfdag-slurm}}
CTLD_PORT=${PERFDAG_SLURM_PORT:-6817}
SLURMD_PORT=$((CTLD_PORT + 1))
NODES=${PERFDAG_SLURM_NODES:-1}
ETC=$DIR/etc LOG=$DIR/log RUN=$DIR/run
CONF=$ETC/slurm.conf
HOST=$(hostname -s)
[[ $NODES =~ ^[1-9][0-9]?$ ]] || { echo "slurm-local: PERFDAG_SLURM_NODES=$NODES is not a node count (1..99)" >&2; exit 2; }
# Node names: the host's own for one node; <host>-n<i> for several (slurmd -N picks its entry).
node_names() { if [ "$NODES" = 1 ]; then echo "$HOST"; else seq -f "$HOST-n%g" 0 $((NODES - 1)); fi; }
# slurmd's pid file and log per node (slurm.conf's %n); one node keeps slurmd.pid and slurmd.log.
slurmd_pid() { if [ "$NODES" = 1 ]; then echo "$RUN/slurmd.pid"; else echo "$RUN/slurmd-$1.pid"; fi; }
slurmd_log() { if [ "$NODES" = 1 ]; then echo "$LOG/slurmd.log"; else echo "$LOG/slurmd-$1.log"; fi; }
slurmds_alive() { local n; for n in $(node_names); do alive "$(slurmd_pid "$n")" || return 1; done; }

die() { echo "slurm-local: $*" >&2; exit 3; }
# The daemons are the cluster's, not perfdag's: none inherits perfdag's variables (a user's exported
# PERFDAG_ARTIFACTS would make them look like perfdag processes left behind).
daemon() { env $(compgen -e | sed -n 's/^PERFDAG_.*/-u &/p') "$@"; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install() {
  # libpmix-dev: srun --mpi=pmix (an instance over several nodes as MPI ranks) loads its libpmix.so
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
    && command -v munged >/dev/null && ldconfig -p | grep -q 'libpmix\.so ' && return 0
  [ "$(id -u)" = 0 ] || die "slurm is not installed and installing needs root"
  echo "slurm-local: installing munge slurmctld slurmd slurm-client libpmix-dev (apt)"
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      munge slurmctld slurmd slurm-client libpmix-dev; } >"$DIR/apt.log" 2>&1 \
    || die "apt-get could not install slurm; see $DIR/apt.log"
}

configure() {
  mkdir -p "$ETC" "$LOG" "$RUN" "$DIR/state" "$DIR/spool" "$DIR/munge" "$DIR/dev"
  chmod 700 "$DIR/munge"
  # Fake GPUs: slurmd drops a GPU whose File= does not exist; a character device is enough.
  for i in 0 1; do [ -c "$DIR/dev/fakegpu$i" ] || mknod "$DIR/dev/fakegpu$i" c 1 3; done
  local cpus mem
  # nproc counts OMP_NUM_THREADS as the CPUs it may use: the node gets the CPUs the machine has.
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))  # half the host's memory, MB
  cat >"$CONF" <<CONF
ClusterName=perfdag-local
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool$( [ "$NODES" = 1 ] || echo /%n)
TmpFS=$( [ "$NODES" = 1 ] && echo /tmp || echo "$DIR/tmp/%n")
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd$( [ "$NODES" = 1 ] || echo -%n).pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd$( [ "$NODES" = 1 ] || echo -%n).log
ProctrackType=${PERFDAG_SLURM_PROCTRACK:-proctrack/cgroup}
TaskPlugin=${PERFDAG_SLURM_TASK:-task/cgroup}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
JobAcctGatherType=jobacct_gather/none
CONF
  local name i=0 nodes
  for name in $(node_names); do
    if [ "$NODES" = 1 ]; then
      echo "NodeName=$name NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN"
    else  # one slurmd per node on this host: each its own port
      echo "NodeName=$name NodeAddr=127.0.0.1 NodeHostname=$HOST Port=$((SLURMD_PORT + i)) CPUs=$cpus RealMemory=$((mem / NODES)) Gres=gpu:2 State=UNKNOWN"
    fi
    i=$((i + 1))
  done >>"$CONF"
  nodes=$(node_names | paste -sd,)
  echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
  for name in $(node_names); do
    echo "NodeName=$name Name=gpu File=$DIR/dev/fakegpu[0-1]"
    [ "$NODES" = 1 ] || mkdir -p "$DIR/spool/$name" "$DIR/tmp/$name"  # (srun --mpi=pmix's directories per node)
  done >"$ETC/gres.conf"
  # Slurm's own OCI containers (srun --container=<bundle>, perfdag's slurm.container_bundle), where crun
  # is installed: Slurm's documented crun "run" example, with crun's state under DIR, and no cgroup of
  # crun's own (the container stays in the step's cgroup, so scancel and proctrack reach what it runs).
  rm -f "$ETC/oci.conf" "$ETC/crun"
  if command -v crun >/dev/null; then
    mkdir -p "$RUN/crun"
    local crun=crun id="%n.%u.%j.%s.%t"
    # crun (1.8) refuses a host whose cgroup v2 tree is mounted beside v1 with controllers in it ("cgroups
    # in hybrid mode not supported", this sandbox's: hugetlb on /sys/fs/cgroup/unified). There it runs in a
    # mount namespace of its own without that mount: it uses no cgroup of its own (disabled) anyway.
    if [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null)" ]; then
      crun=$ETC/crun
      printf '%s\n' '#!/bin/sh' '# crun without the hybrid cgroup v2 mount (scripts/slurm-local.sh)' \
        "exec unshare -m --propagation private sh -c 'umount /sys/fs/cgroup/unified && exec crun \"\$@\"' crun \"\$@\"" >"$crun"
      chmod 755 "$crun"
    fi
    cat >"$ETC/oci.conf" <<CONF
RunTimeQuery="$crun --root=$RUN/crun state $id"
RunTimeKill="$crun --root=$RUN/crun kill -a $id"
RunTimeDelete="$crun --root=$RUN/crun delete --force $id"
RunTimeRun="$crun --cgroup-manager=disabled --root=$RUN/crun run --bundle %b $id"
CONF
  fi
  # Memory limits are enforced by the cgroup (a job over --mem ends OUT_OF_MEMORY).
  cat >"$ETC/cgroup.conf" <<CONF
CgroupPlugin=autodetect
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
ConstrainCores=no
ConstrainDevices=no
CONF
}

start() {
  [ "$(id -u)" = 0 ] || die "needs root (slurmd runs jobs and sets up cgroups)"
  mkdir -p "$DIR"
  install
  if alive "$RUN/slurmctld.pid" && slurmds_alive && alive "$RUN/munged.pid"; then
    echo "slurm-local: already running"; status; return 0
  fi
  stop >/dev/null 2>&1 || true  # a half-started cluster: start clean
  configure
  [ -r /etc/munge/munge.key ] || die "no /etc/munge/munge.key (the munge package makes it); reinstall munge"
  daemon munged --force --socket="$DIR/munge/munge.socket" --pid-file="$RUN/munged.pid" \
    --log-file="$LOG/munged.log" --seed-file="$DIR/munge/seed" --key-file=/etc/munge/munge.key \
    || die "munged did not start; see $LOG/munged.log"
  export SLURM_CONF=$CONF
  daemon slurmctld -f "$CONF" || die "slurmctld did not start; see $LOG/slurmctld.log"
  local i name
  for name in $(node_names); do
    if [ "$NODES" = 1 ]; then daemon slurmd -f "$CONF"; else daemon slurmd -f "$CONF" -N "$name"; fi \
      || die "slurmd of $name did not start; see $(slurmd_log "$name")"
  done
  for i in $(seq 1 60); do
    if [ "$(sinfo -h -N -o %t 2>/dev/null | grep -cx idle)" = "$NODES" ]; then
      echo "slurm-local: $NODES node(s) idle after ${i}x0.5 s"; status; return 0
    fi
    for name in $(node_names); do
      alive "$(slurmd_pid "$name")" || die "slurmd of $name exited; see $(slurmd_log "$name")"
    done
    alive "$RUN/slurmctld.pid" || die "slurmctld exited; see $LOG/slurmctld.log"
    sleep 0.5
  done
  die "the nodes did not become idle in 30 s ($(sinfo -h -N -o '%N %t %E' 2>&1 | paste -sd' ')); see $LOG/slurmd*.log and $LOG/slurmctld.log"
}

stop_pid() {  # pid file, name: TERM, wait up to 10 s, then KILL
  local f=$1 pid
  alive "$f" || { rm -f "$f"; return 0; }
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
  echo "slurm-local: stopped $2 (pid $pid)"
}

stop() {
  if [ -f "$CONF" ] && alive "$RUN/slurmctld.pid"; then
    SLURM_CONF=$CONF scancel --quiet --state=PENDING,RUNNING,SUSPENDED --full -u root 2>/dev/null || true
    for _ in $(seq 1 20); do [ -z "$(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
  fi
  local f  # every slurmd this directory started, whatever PERFDAG_SLURM_NODES says now
  for f in "$RUN"/slurmd*.pid; do [ -e "$f" ] && stop_pid "$f" "slurmd $(basename "$f" .pid)"; done
  # slurmstepd daemons belong to slurmd's jobs; any left after scancel are ours (found by this config).
  for p in $(pgrep -x slurmstepd 2>/dev/null); do
    grep -qs "$DIR" "/proc/$p/environ" "/proc/$p/cmdline" && kill -9 "$p" 2>/dev/null || true
  done
  stop_pid "$RUN/slurmctld.pid" slurmctld
  stop_pid "$RUN/munged.pid" munged
}

status() {
  local name
  local f
  for name in munged slurmctld $(node_names | sed 's/^/slurmd:/'); do
    case $name in slurmd:*) f=$(slurmd_pid "${name#slurmd:}") ;; *) f=$RUN/$name.pid ;; esac
    if alive "$f"; then echo "$name: running, pid $(cat "$f")"; else echo "$name: stopped"; fi
  done
  if alive "$RUN/slurmctld.pid"; then
    SLURM_CONF=$CONF sinfo -N -o '%N %t %G %c %m' 2>&1 | sed 's/^/  /'
  fi
  echo "logs: $LOG (slurmctld.log, slurmd.log, munged.log)"
  echo "export SLURM_CONF=$CONF"
}

case $cmd in
  start) start ;;
  stop) stop; echo "logs: $LOG" ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status [DIR]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# An OCI bundle for Slurm's own containers (`srun --container=<bundle>`, perfdag's slurm.container_bundle)
# made of this host's Debian userland: `crun spec` writes the base config.json; the rootfs is an empty
# directory tree into which config.json bind-mounts the host's /usr (and /bin, /lib*, /sbin as Debian's
# merged-usr links), /etc read-only, and each PATH given read-write at its own path (the checkout, its
# venv, the artifacts root, the Slurm cluster's directory).
#
#   scripts/oci-bundle.sh DIR [PATH...]
#
# What perfdag needs of a bundle (harness/slurm/oci.py checks it): the host's pid and network
# namespaces (server records keep host pids; servers bind the node's address), so only the mount
# namespace is the container's own; /dev/shm is the host's (a server and its client share memory from
# different steps). process.env is left empty: Slurm writes the step's environment into it. The rootfs
# holds one file of its own, /perfdag-oci-bundle, which only a process inside the container sees.
# Needs crun (Debian package `crun`). Exit 2: bad arguments; 3: no crun.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 DIR [PATH...]" >&2; exit 2; }
DIR=$1; shift
case $DIR in /*) ;; *) echo "oci-bundle: DIR must be an absolute path (Slurm finds the bundle by it on every node)" >&2; exit 2 ;; esac
for p in "$@"; do
  case $p in /*) ;; *) echo "oci-bundle: $p: give absolute paths" >&2; exit 2 ;; esac
  [ -d "$p" ] || { echo "oci-bundle: $p is not a directory" >&2; exit 2; }
done
command -v crun >/dev/null || { echo "oci-bundle: crun is not installed (apt-get install crun)" >&2; exit 3; }

mkdir -p "$DIR/rootfs"
rm -f "$DIR/config.json"
(cd "$DIR" && crun spec)
echo "perfdag OCI bundle $DIR" >"$DIR/rootfs/perfdag-oci-bundle"
ro=(/usr /etc)
for d in bin sbin lib lib32 lib64 libx32; do  # merged-usr: links into /usr; else bound like /usr
  if [ -L "/$d" ]; then ln -sfn "$(readlink "/$d")" "$DIR/rootfs/$d"
  elif [ -d "/$d" ]; then ro+=("/$d"); fi
done
for p in "${ro[@]}" "$@" /dev/shm; do mkdir -p "$DIR/rootfs$p"; done

python3 - "$DIR/config.json" "${#ro[@]}" "${ro[@]}" "$@" <<'PY'
import json, sys

path, n = sys.argv[1], int(sys.argv[2])
ro, rw = sys.argv[3:3 + n], sys.argv[3 + n:]
config = json.load(open(path))
config["process"]["env"] = []          # Slurm appends the step's environment
config["process"]["terminal"] = False  # (Slurm sets it too) stdio is the step's
config.pop("hostname", None)           # no UTS namespace: the node's own name
keep = {"mount"}
config["linux"]["namespaces"] = [ns for ns in config["linux"]["namespaces"] if ns["type"] in keep]
mounts = [m for m in config["mounts"] if m["destination"] != "/dev/shm"]
bind = lambda p, opts: {"destination": p, "type": "bind", "source": p, "options": ["rbind", *opts]}
mounts += [bind("/dev/shm", ["rw"])] + [bind(p, ["ro"]) for p in ro] + [bind(p, ["rw"]) for p in rw]
config["mounts"] = mounts
json.dump(config, open(path, "w"), indent=2)
PY
echo "oci-bundle: $DIR (rootfs: the host's userland read-only; read-write: ${*:-nothing more})"

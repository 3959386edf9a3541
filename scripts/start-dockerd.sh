#!/usr/bin/env bash
# Starts a Docker engine for the tests when none answers on the default socket, with the flags this
# kind of machine needs (no iptables, no bridge network, the vfs storage driver), and waits until it
# answers. Idempotent: an engine already running is left alone.
set -euo pipefail
if timeout 10 docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "note: no dockerd here (apt-get install docker.io); the Docker tests will be skipped" >&2
  exit 0
fi
log=${KALENA_DOCKERD_LOG:-/var/log/kalena-test-dockerd.log}
setsid nohup dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver=vfs \
  >>"$log" 2>&1 </dev/null &
for _ in $(seq 1 120); do
  if timeout 10 docker info >/dev/null 2>&1; then
    exit 0
  fi
  sleep 0.5
done
echo "dockerd did not answer within 60 s; see $log" >&2
tail -20 "$log" >&2 || true
exit 1

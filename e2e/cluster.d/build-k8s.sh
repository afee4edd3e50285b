#!/usr/bin/env bash
# Build the Kubernetes and etcd server binaries from the Go module proxy and cache
# them by version outside the checkout.
#
#   e2e/cluster.d/build-k8s.sh [K8S_VERSION [ETCD_VERSION]]
#
# Kubernetes' own go.mod replaces its ~30 staging modules (k8s.io/api, client-go, ...)
# with local paths, so `go install k8s.io/kubernetes/cmd/...@v` is refused. We build
# from a throwaway module that requires k8s.io/kubernetes and replaces every staging
# module with its published v0.x twin. etcd's server module has the same issue.
set -euo pipefail

K8S_VERSION=${1:-${HS_K8S_VERSION:-v1.34.4}}
ETCD_VERSION=${2:-${HS_ETCD_VERSION:-v3.6.16}}
CACHE=${HS_E2E_CACHE:-/var/cache/hellostateful}
K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
: "${GOMAXPROCS:=2}"; export GOMAXPROCS

log() { echo "build-k8s: $*" >&2; }

# Write a go.mod for a throwaway module at $1 that requires $2@$3 and replaces each
# module that $2's go.mod replaces with a relative path by the same module at the
# version that path corresponds to ($4 prints that version for a module path).
make_module() {
  local dir=$1 mod=$2 ver=$3 verfn=$4
  rm -rf "$dir"; mkdir -p "$dir"
  local gomod
  gomod=$(cd "$dir" && go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -f $gomod ]] || { log "cannot download $mod@$ver"; return 1; }
  {
    echo "module hsbuild"
    echo
    sed -n 's/^go \([0-9.]*\)$/go \1/p' "$gomod" | head -1
    grep -E '^godebug ' "$gomod" || true
    echo
    echo "require $mod $ver"
    echo
    # "\tk8s.io/api => ./staging/src/k8s.io/api" (inside a replace block or single line)
    # (etcd also "replaces" modules it forbids with ./FORBIDDEN_DEPENDENCY: skip those)
    grep -v FORBIDDEN_DEPENDENCY "$gomod" |
      sed -nE 's#^(replace[[:space:]]+)?[[:space:]]*([^[:space:]]+)[[:space:]]+=>[[:space:]]+\.\.?/[^[:space:]]+[[:space:]]*$#\2#p' |
      while read -r m; do echo "replace $m => $m $($verfn "$m")"; done
  } >"$dir/go.mod"
}

k8s_staging_version() { echo "v0.${K8S_VERSION#v1.}"; }
etcd_sibling_version() { echo "$ETCD_VERSION"; }

build_k8s() {
  local out=$CACHE/k8s-$K8S_VERSION
  local missing=0 b
  for b in "${K8S_BINS[@]}"; do [[ -x $out/$b ]] || missing=1; done
  if (( ! missing )); then log "kubernetes $K8S_VERSION cached in $out"; return 0; fi
  local work=$CACHE/build/k8s-$K8S_VERSION
  log "building kubernetes $K8S_VERSION in $work (15-35 min on 2 cores)"
  make_module "$work" k8s.io/kubernetes "$K8S_VERSION" k8s_staging_version
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    for b in "${K8S_BINS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$b\""; done
    echo ")"
  } >"$work/tools.go"
  (cd "$work" && go mod tidy -e >&2)
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local ld="-s -w"
  local p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$date -X $p.gitCommit=0000000000000000000000000000000000000000"
  done
  mkdir -p "$out.tmp"
  for b in "${K8S_BINS[@]}"; do
    [[ -x $out.tmp/$b ]] && continue
    log "go build $b"
    local t0=$SECONDS
    (cd "$work" && go build -p 2 -trimpath -ldflags "$ld" -o "$out.tmp/$b.part" "k8s.io/kubernetes/cmd/$b")
    mv "$out.tmp/$b.part" "$out.tmp/$b"
    log "built $b in $((SECONDS - t0))s"
  done
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "kubernetes $K8S_VERSION ready in $out"
}

build_etcd() {
  local out=$CACHE/etcd-$ETCD_VERSION
  if [[ -x $out/etcd ]]; then log "etcd $ETCD_VERSION cached in $out"; return 0; fi
  local work=$CACHE/build/etcd-$ETCD_VERSION
  log "building etcd $ETCD_VERSION in $work"
  make_module "$work" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" etcd_sibling_version
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$work/tools.go"
  (cd "$work" && go mod tidy -e >&2)
  mkdir -p "$out.tmp"
  (cd "$work" && go build -p 2 -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$out"; mv "$out.tmp" "$out"
  log "etcd $ETCD_VERSION ready in $out"
}

mkdir -p "$CACHE"
t0=$SECONDS
build_etcd
build_k8s
log "done in $((SECONDS - t0))s"

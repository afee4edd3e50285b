#!/usr/bin/env bash
# Build CoreDNS (the cluster's DNS server) from the Go module proxy into
# $CACHE/tools/coredns-$VERSION, with only the plugins in coredns/main.go.
set -euo pipefail
VERSION=${1:-${HS_COREDNS_VERSION:-v1.15.0}}
CACHE=${HS_E2E_CACHE:-/var/cache/hellostateful}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$CACHE/tools/coredns-$VERSION
if [[ ! -x $out ]]; then
  echo "build-coredns: building coredns $VERSION (2-5 min)" >&2
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod"
  : "${GOMAXPROCS:=2}"; export GOMAXPROCS
  mkdir -p "$CACHE/tools"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp "$HERE/coredns/main.go" "$tmp/"
  # -mod=mod lets `go build` record only the modules main.go's imports need (go mod tidy
  # would also fetch the test dependencies of every plugin); versions come from CoreDNS's go.mod.
  (cd "$tmp" && go mod init hellostateful-coredns && go get "github.com/coredns/coredns@$VERSION" &&
    go build -trimpath -ldflags '-s -w' -o "$tmp/coredns" .) >&2
  mv "$tmp/coredns" "$out"
fi
ln -sfn "coredns-$VERSION" "$CACHE/tools/coredns"

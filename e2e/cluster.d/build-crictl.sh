#!/usr/bin/env bash
# Build crictl (debugging tool for the CRI; `e2e/cluster down` also uses it to stop pod
# sandboxes cleanly) from the Go module proxy into $CACHE/tools/crictl.
set -euo pipefail
VERSION=${1:-${HS_CRICTL_VERSION:-v1.34.0}}
CACHE=${HS_E2E_CACHE:-/var/cache/hellostateful}
out=$CACHE/tools/crictl-$VERSION
if [[ ! -x $out ]]; then
  echo "build-crictl: building crictl $VERSION" >&2
  mkdir -p "$CACHE/tools"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  GOBIN=$tmp CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false \
    go install -trimpath -ldflags '-s -w' "sigs.k8s.io/cri-tools/cmd/crictl@$VERSION" >&2
  mv "$tmp/crictl" "$out"
fi
ln -sfn "crictl-$VERSION" "$CACHE/tools/crictl"

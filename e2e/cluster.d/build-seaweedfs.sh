#!/usr/bin/env bash
# Build SeaweedFS (the S3-compatible object store the object-store tests back up to) from
# the Go module proxy into $CACHE/tools/weed-$VERSION. Its go.mod has replace directives,
# so `go install mod@version` refuses it: the module is downloaded and built in place.
set -euo pipefail
VERSION=${1:-${HS_SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}}
CACHE=${HS_E2E_CACHE:-/var/cache/hellostateful}
out=$CACHE/tools/weed-$VERSION
mkdir -p "$CACHE/tools"
# One build at a time: e2e/run-all builds it beside the first suites, and the object-store
# suites that start meanwhile wait here for it rather than build it twice.
exec 9>"$out.lock"
flock 9
if [[ ! -x $out ]]; then
  echo "build-seaweedfs: building SeaweedFS $VERSION (about 10 minutes on 2 cores)" >&2
  tmp=$(mktemp -d)
  trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
  export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
  dir=$(cd "$tmp" && go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" | jq -r .Dir)
  [[ -d $dir ]] || { echo "build-seaweedfs: could not download SeaweedFS $VERSION" >&2; exit 1; }
  (cd "$dir" && go build -trimpath -ldflags '-s -w' -o "$tmp/weed" ./weed) >&2
  mv "$tmp/weed" "$out"
fi
echo "$out"

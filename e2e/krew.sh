#!/usr/bin/env bash
# Krew distribution, checked offline with Krew's own tools:
#   HS_PLUGIN=target/release/kubectl-hellostateful bash e2e/krew.sh
#
# Builds krew and validate-krew-manifest (v0.4.3, from the Go module proxy; cached by version
# in /var/cache/hellostateful/tools/krew-v0.4.3), packs the release plugin for linux/amd64
# with `krew/package archive`, renders the manifest with `krew/package manifest --only-built`,
# validates it, installs it with `kubectl krew install --manifest --archive` into a temporary
# KREW_ROOT and runs `kubectl hellostateful version` through kubectl's plugin discovery.
# Needs no cluster (KUBECONFIG is used only if set, for the reconciler line of `version`).
set -uo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$E2E_DIR/.." && pwd)
# shellcheck source=lib.sh
source "$E2E_DIR/lib.sh"
E2E_SUITE=krew

KREW_VERSION=v0.4.3
TOOLS=${HS_E2E_CACHE:-/var/cache/hellostateful}/tools/krew-$KREW_VERSION
HS_PLUGIN=${HS_PLUGIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/kubectl-hellostateful}
VERSION=v$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n1)
ARCHIVE_NAME=kubectl-hellostateful_${VERSION}_linux_amd64.tar.gz

WORK=$(mktemp -d /tmp/krew-e2e.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/out                 # archive + rendered manifest
ARCHIVE=$OUT/$ARCHIVE_NAME
MANIFEST=$OUT/hellostateful.yaml
mkdir -p "$OUT" "$WORK/bin"
echo "plugin $HS_PLUGIN, version $VERSION, krew tools $TOOLS, work dir $WORK"

# sha256 of a file
sha() { sha256sum "$1" | cut -d' ' -f1; }

# 1. krew and validate-krew-manifest, built once per version outside the checkout
test_krew_tools() {
  if [[ ! -x $TOOLS/krew || ! -x $TOOLS/validate-krew-manifest ]]; then
    command -v go >/dev/null || { echo "go is needed to build krew $KREW_VERSION"; return 1; }
    mkdir -p "$(dirname "$TOOLS")"
    (
      flock 9
      if [[ ! -x $TOOLS/krew || ! -x $TOOLS/validate-krew-manifest ]]; then
        echo "building krew $KREW_VERSION from the Go module proxy (about a minute)"
        tmp=$(mktemp -d "$TOOLS.tmp.XXXXXX")
        GOBIN=$tmp GOTOOLCHAIN=local CGO_ENABLED=0 go install \
          "sigs.k8s.io/krew/cmd/krew@$KREW_VERSION" \
          "sigs.k8s.io/krew/cmd/validate-krew-manifest@$KREW_VERSION"
        mkdir -p "$TOOLS"
        mv "$tmp/krew" "$tmp/validate-krew-manifest" "$TOOLS/"
        rmdir "$tmp"
      fi
    ) 9>"$(dirname "$TOOLS")/.krew-$KREW_VERSION.lock"
  fi
  [[ -x $TOOLS/krew && -x $TOOLS/validate-krew-manifest ]]
  # `kubectl krew` is the krew binary found on PATH as kubectl-krew.
  ln -sf "$TOOLS/krew" "$WORK/bin/kubectl-krew"
}

# 2. the archive: GNU tar of regular files only, the plugin binary and LICENSE, reproducible
test_archive() {
  [[ -x $HS_PLUGIN ]] || { echo "no release plugin at $HS_PLUGIN (cargo build --release -p kubectl-hellostateful)"; return 1; }
  [[ $("$ROOT/krew/package" archive linux amd64 "$HS_PLUGIN" "$OUT") == "$ARCHIVE" ]]
  [[ -f $ARCHIVE ]]
  local listing names types
  listing=$(tar -tvzf "$ARCHIVE")
  echo "$listing"
  names=$(tar -tzf "$ARCHIVE" | sort | tr '\n' ' ')
  [[ $names == "LICENSE kubectl-hellostateful kubectl_complete-hellostateful " ]] || { echo "unexpected entries: $names"; return 1; }
  types=$(awk '{ print substr($1, 1, 1) }' <<<"$listing" | sort -u)
  [[ $types == - ]] || { echo "entries that are not regular files: $listing"; return 1; }
  # GNU format: the ustar magic is "ustar  \0" (POSIX would be "ustar\0" "00").
  [[ $(gzip -dc "$ARCHIVE" | head -c 265 | tail -c 8 | od -An -c | tr -s ' ') == " u s t a r \0" ]] ||
    { echo "not a GNU tar archive"; return 1; }
  mkdir "$WORK/x"
  tar -xzf "$ARCHIVE" -C "$WORK/x"
  cmp "$WORK/x/kubectl-hellostateful" "$HS_PLUGIN"
  cmp "$WORK/x/LICENSE" "$ROOT/LICENSE"
  [[ -x $WORK/x/kubectl-hellostateful && -x $WORK/x/kubectl_complete-hellostateful ]]
  # Packing the same binary again gives the same bytes (fixed owner, order, times).
  mkdir "$WORK/again"
  "$ROOT/krew/package" archive linux amd64 "$HS_PLUGIN" "$WORK/again" >/dev/null
  [[ $(sha "$WORK/again/$ARCHIVE_NAME") == $(sha "$ARCHIVE") ]] || { echo "archive is not reproducible"; return 1; }
}

# 3. the manifest rendered for the archives that exist: this version, their sha256, no placeholder
test_manifest_only_built() {
  [[ $("$ROOT/krew/package" manifest "$OUT" --only-built) == "$MANIFEST" ]]
  cat "$MANIFEST"
  grep -qx 'apiVersion: krew.googlecontainertools.github.com/v1alpha2' "$MANIFEST"
  grep -qx '  name: hellostateful' "$MANIFEST"   # the file name must equal metadata.name
  grep -qx "  version: $VERSION" "$MANIFEST"
  grep -qx "      sha256: $(sha "$ARCHIVE")" "$MANIFEST"
  grep -q "uri: .*/$VERSION/$ARCHIVE_NAME\$" "$MANIFEST"
  [[ $(grep -c 'matchLabels:' "$MANIFEST") == 1 ]]
  grep -q 'matchLabels: {os: linux, arch: amd64}' "$MANIFEST"
  if grep -nE 'VERSION|SHA256_|^#' "$MANIFEST"; then echo "placeholders or comments left"; return 1; fi
}

# 4. a release renders only with every platform's archive: without --only-built a missing one fails
test_manifest_missing_archive_fails() {
  local dir=$WORK/partial out
  mkdir "$dir"
  cp "$ARCHIVE" "$dir/"
  if out=$("$ROOT/krew/package" manifest "$dir" 2>&1); then
    echo "rendering succeeded with archives missing:"; echo "$out"; return 1
  fi
  echo "$out"
  grep -q "missing .*kubectl-hellostateful_${VERSION}_darwin_arm64.tar.gz" <<<"$out"
  grep -q "windows_amd64" <<<"$out"
  [[ ! -e $dir/hellostateful.yaml ]] || { echo "a manifest was written anyway"; return 1; }
}

# 5. Krew's own validator accepts the manifest (and is not a no-op: it refuses a broken one)
test_validate_krew_manifest() {
  "$TOOLS/validate-krew-manifest" -manifest="$MANIFEST" -skip-install 2>&1 | tail -n 5
  [[ ${PIPESTATUS[0]} == 0 ]] || { echo "validate-krew-manifest refused $MANIFEST"; return 1; }
  mkdir "$WORK/broken"
  sed "s/^  version: v/  version: /" "$MANIFEST" >"$WORK/broken/hellostateful.yaml"
  if "$TOOLS/validate-krew-manifest" -manifest="$WORK/broken/hellostateful.yaml" -skip-install >"$WORK/broken.log" 2>&1; then
    echo "validate-krew-manifest accepted a version without v"; return 1
  fi
  grep -m1 -i 'version' "$WORK/broken.log"
}

# 6. kubectl krew install --manifest --archive, offline, into a temporary KREW_ROOT; then
#    kubectl finds the plugin by itself and `kubectl hellostateful version` runs
test_krew_install_and_discovery() {
  export KREW_ROOT=$WORK/krew-root KREW_NO_UPGRADE_CHECK=1
  PATH=$WORK/bin:$PATH kubectl krew install --manifest="$MANIFEST" --archive="$ARCHIVE" </dev/null
  [[ -f $KREW_ROOT/receipts/hellostateful.yaml ]]
  [[ -L $KREW_ROOT/bin/kubectl-hellostateful ]]
  cmp "$KREW_ROOT/store/hellostateful/$VERSION/kubectl-hellostateful" "$HS_PLUGIN"
  [[ -f $KREW_ROOT/store/hellostateful/$VERSION/LICENSE ]]
  local plugins first out
  plugins=$(PATH=$KREW_ROOT/bin:$PATH kubectl plugin list 2>/dev/null || true)
  echo "$plugins"
  first=$(grep -m1 '/kubectl-hellostateful$' <<<"$plugins")
  [[ $first == "$KREW_ROOT/bin/kubectl-hellostateful" ]] || { echo "kubectl would run $first"; return 1; }
  out=$(PATH=$KREW_ROOT/bin:$PATH kubectl hellostateful version)
  echo "$out"
  grep -qE "^Plugin: +kubectl-hellostateful ${VERSION#v}\$" <<<"$out"
  # Completion through kubectl, once the shipped script is linked as the caveats say:
  # kubectl runs it, and the plugin answers with its commands, flags and apps.
  ln -s "$KREW_ROOT/store/hellostateful/$VERSION/kubectl_complete-hellostateful" "$KREW_ROOT/bin/"
  out=$(PATH=$KREW_ROOT/bin:$PATH kubectl __complete hellostateful ba 2>/dev/null)
  echo "$out"
  grep -q $'^backup\tBack up an app now$' <<<"$out"
  grep -q $'^backups\t' <<<"$out"
  out=$(PATH=$KREW_ROOT/bin:$PATH kubectl __complete hellostateful restore x --fr 2>/dev/null)
  grep -q $'^--from\t' <<<"$out" || { echo "$out"; return 1; }
}

# 7. krew refuses an archive whose sha256 does not match the manifest
test_krew_checks_sha256() {
  export KREW_ROOT=$WORK/krew-root-bad KREW_NO_UPGRADE_CHECK=1
  mkdir "$WORK/badsum"
  # A well-formed sha256, of another file.
  sed "s/^      sha256: .*/      sha256: $(sha "$ROOT/LICENSE")/" "$MANIFEST" >"$WORK/badsum/hellostateful.yaml"
  local out
  if out=$(PATH=$WORK/bin:$PATH kubectl krew install --manifest="$WORK/badsum/hellostateful.yaml" --archive="$ARCHIVE" </dev/null 2>&1); then
    echo "krew installed an archive with a wrong sha256:"; echo "$out"; return 1
  fi
  grep 'checksum does not match' <<<"$out"
  [[ ! -e $KREW_ROOT/bin/kubectl-hellostateful ]]
}

run_test krew_tools test_krew_tools
run_test archive_regular_files_and_license test_archive
run_test manifest_only_built test_manifest_only_built
run_test manifest_missing_archive_fails test_manifest_missing_archive_fails
run_test validate_krew_manifest test_validate_krew_manifest
run_test krew_install_and_discovery test_krew_install_and_discovery
run_test krew_checks_sha256 test_krew_checks_sha256
summary

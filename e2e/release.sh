#!/usr/bin/env bash
# The release pipeline (.github/workflows/release.yml), checked offline: actionlint (with
# shellcheck on every `run:` script) lints the workflows, and the steps this machine can
# run are run: the image tarball that `crane push` takes, and release/pin-image on a copy
# of manifests/. Pushing to a registry is the only step left to the forge.
#
#   bash e2e/release.sh      (needs no cluster; kubectl for `kubectl kustomize`)
#
# actionlint and crane are built from the Go module proxy, cached by version in
# /var/cache/hellostateful/tools.
set -uo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$E2E_DIR/.." && pwd)
# shellcheck source=lib.sh
source "$E2E_DIR/lib.sh"
# shellcheck source=hs.sh
source "$E2E_DIR/hs.sh"
E2E_SUITE=release

ACTIONLINT_VERSION=v1.7.12
CRANE_VERSION=v0.22.1
TOOLS=${HS_E2E_CACHE:-/var/cache/hellostateful}/tools
IMAGE_TAR=${IMAGE_TAR:-${CARGO_TARGET_DIR:-$ROOT/target}/hellostateful-reconciler.tar}
DIGEST=sha256:$(printf '%064d' 7)
WORK=$(mktemp -d /tmp/release-e2e.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

test_tools() {
  ACTIONLINT=$(go_tool actionlint github.com/rhysd/actionlint/cmd/actionlint "$ACTIONLINT_VERSION")
  CRANE=$(go_tool crane github.com/google/go-containerregistry/cmd/crane "$CRANE_VERSION")
  "$ACTIONLINT" -version | head -n1
  "$CRANE" version
}

test_workflows_pass_actionlint_and_shellcheck() {
  command -v shellcheck >/dev/null || { echo "shellcheck is missing (e2e/deps installs it)"; return 1; }
  (cd "$ROOT" && "$TOOLS/actionlint-$ACTIONLINT_VERSION/actionlint" -shellcheck "$(command -v shellcheck)")
  # The linter is live: a broken workflow fails it.
  mkdir -p "$WORK/lint/.github/workflows"
  printf 'on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo "${{ matrix.nothing }}"\n' \
    >"$WORK/lint/.github/workflows/bad.yml"
  expect_fail "matrix" "$TOOLS/actionlint-$ACTIONLINT_VERSION/actionlint" "$WORK/lint/.github/workflows/bad.yml"
}

# What the image job pushes: a valid image tarball of this machine's architecture.
test_the_image_tarball_is_what_crane_pushes() {
  local crane="$TOOLS/crane-$CRANE_VERSION/crane" config
  [[ -f $IMAGE_TAR ]] || { echo "no image at $IMAGE_TAR: run e2e/build-image first"; return 1; }
  "$crane" validate --tarball "$IMAGE_TAR"
  config=$(tar -xOf "$IMAGE_TAR" "$(tar -xOf "$IMAGE_TAR" manifest.json | jq -r '.[0].Config')")
  jq -e '.architecture == "amd64" and .os == "linux" and .config.User == "65532"' <<<"$config" >/dev/null ||
    { echo "$config"; return 1; }
}

# The Dockerfile (for those who build with Docker) makes the image e2e/build-image makes: the
# same files, user, entrypoint and arguments.
test_the_dockerfile_packs_what_the_image_tarball_holds() {
  [[ -f $IMAGE_TAR ]] || { echo "no image at $IMAGE_TAR: run e2e/build-image first"; return 1; }
  python3 - "$ROOT/Dockerfile" "$IMAGE_TAR" <<'PY'
import io, json, sys, tarfile
dockerfile, image = sys.argv[1], tarfile.open(sys.argv[2])
lines = open(dockerfile).read().replace("\\\n", " ").splitlines()
final = [l.split(None, 1) for l in lines[max(i for i, l in enumerate(lines) if l.startswith("FROM ")):]
         if l.strip() and not l.startswith("#")]
built = {"files": sorted(args.split()[-1] for op, args in final if op == "COPY"),
         "user": next(args for op, args in final if op == "USER").strip(),
         "entrypoint": json.loads(next(args for op, args in final if op == "ENTRYPOINT")),
         "cmd": json.loads(next(args for op, args in final if op == "CMD"))}
manifest = json.load(image.extractfile("manifest.json"))[0]
config = json.load(image.extractfile(manifest["Config"]))["config"]
files = []
for layer in manifest["Layers"]:
    with tarfile.open(fileobj=io.BytesIO(image.extractfile(layer).read())) as contents:
        files += ["/" + m.name.lstrip("./") for m in contents.getmembers() if m.isfile()]
packed = {"files": sorted(files), "user": config["User"], "entrypoint": config["Entrypoint"],
          "cmd": config["Cmd"]}
assert built == packed, f"Dockerfile: {built}\nimage tarball: {packed}"
PY
}

test_pin_image_points_the_install_at_one_digest() {
  local ref="ghcr.io/hellostateful/hellostateful-reconciler@$DIGEST"
  cp -r "$ROOT/manifests" "$WORK/manifests"
  "$ROOT/release/pin-image" "$ref" "$WORK/manifests" >/dev/null
  "$ROOT/release/pin-image" "$ref" "$WORK/manifests" >/dev/null   # twice: the same result
  kubectl kustomize "$WORK/manifests" >"$WORK/rendered.yaml"
  python3 - "$ref" "$WORK/rendered.yaml" <<'PY'
import sys, yaml
ref = sys.argv[1]
docs = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
images = [c["image"] for d in docs if d["kind"] == "Deployment"
          for c in d["spec"]["template"]["spec"]["containers"]]
movers = [d["data"]["moverImage"] for d in docs if d["kind"] == "ConfigMap" and "moverImage" in d.get("data", {})]
assert images == [ref, ref] and movers == [ref], (images, movers)
PY
  # Only the image lines changed.
  local file changed
  for file in deployment.yaml admission-webhook.yaml settings.yaml; do
    changed=$(diff "$ROOT/manifests/$file" "$WORK/manifests/$file" | grep -c '^[<>]' || true)
    [[ $changed == 2 ]] || { diff "$ROOT/manifests/$file" "$WORK/manifests/$file"; return 1; }
  done
  expect_fail "pin a digest" "$ROOT/release/pin-image" ghcr.io/hellostateful/hellostateful-reconciler:0.1.0 "$WORK/manifests"
  expect_fail "pin a digest" "$ROOT/release/pin-image" "ghcr.io/x|y/z@$DIGEST" "$WORK/manifests"
  expect_fail "no deployment.yaml" "$ROOT/release/pin-image" "$ref" "$WORK/nowhere"
}

run_test tools test_tools
run_test workflows_pass_actionlint_and_shellcheck test_workflows_pass_actionlint_and_shellcheck
run_test the_image_tarball_is_what_crane_pushes test_the_image_tarball_is_what_crane_pushes
run_test the_dockerfile_packs_what_the_image_tarball_holds test_the_dockerfile_packs_what_the_image_tarball_holds
run_test pin_image_points_the_install_at_one_digest test_pin_image_points_the_install_at_one_digest
summary

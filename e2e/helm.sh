#!/usr/bin/env bash
# The Helm chart (charts/hellostateful) with a real helm, built from the Go module proxy
# and cached by version: it lints; it renders what `kubectl kustomize manifests` makes,
# field for field but those the chart says it adds; its values reach the objects, and bad
# ones are refused with the reason; and on the test cluster it takes over the install
# that `kubectl hellostateful install` made (the upgrade suite's; or e2e/install's, as
# `kubectl apply -k` makes it), is upgraded with new values (the reconciler rolled out, with a
# standby), with the 2018 walkthrough run after each, and leaves the CRD and the apps when
# it is uninstalled.
#
#   bash e2e/helm.sh      (the cluster up and the reconciler installed, as e2e/run-all does)
#
# It takes the install over and removes it at the end: run it after the suites that use
# the install.
set -uo pipefail
E2E_SUITE=helm
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hs.sh
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

HELM_VERSION=v4.3.2
CHART=$E2E_ROOT/charts/hellostateful
RELEASE=hellostateful
DIGEST=sha256:$(printf '%064d' 7)
WORK=$(mktemp -d /tmp/helm-e2e.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
HELM=${HELM:-}

helm() { "$HELM" "$@"; }

test_helm_tools() {
  HELM=$(go_tool helm helm.sh/helm/v4/cmd/helm "$HELM_VERSION")
  "$HELM" version
}
[[ -n $HELM ]] || HELM=${HS_E2E_CACHE:-/var/cache/hellostateful}/tools/helm-$HELM_VERSION/helm

test_the_chart_lints() {
  # Released with the product, under its version.
  [[ $(sed -n 's/^version: //p' "$CHART/Chart.yaml") == "$HS_VERSION" &&
    $(sed -n 's/^appVersion: "\(.*\)"$/\1/p' "$CHART/Chart.yaml") == "$HS_VERSION" ]] ||
    { echo "Chart.yaml's version and appVersion must be $HS_VERSION (Cargo.toml)"; return 1; }
  helm lint --strict "$CHART" --namespace "$RECONCILER_NS"
  helm lint --strict "$CHART" --namespace "$RECONCILER_NS" --set monitoring.enabled=true
}

# same_objects HELM_YAML KUSTOMIZE_YAML: the same objects, field for field, but what the
# chart adds on purpose: Helm's labels, the CRD's keep policy, the reconciler's settings
# checksum (a change of them rolls it out); and no Namespace (Helm's --create-namespace,
# or the admin, makes it: see values.yaml). Strings are compared with their runs of
# white space as one: kustomize's YAML library reads a folded line break before a
# more-indented line as two (the CEL of the policies, where white space means nothing).
same_objects() {
  python3 - "$1" "$2" "$HS_VERSION" <<'EOF'
import sys, yaml
def plain(value):
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return " ".join(value.split()) if isinstance(value, str) else value
def objects(path, chart):
    out = {}
    for o in yaml.safe_load_all(open(path)):
        if not o or (not chart and o["kind"] == "Namespace"):
            continue
        meta = o["metadata"]
        if chart:
            labels = meta["labels"]
            assert labels.pop("app.kubernetes.io/managed-by") == "Helm", meta
            assert labels.pop("app.kubernetes.io/instance") == "hellostateful", meta
            assert labels.pop("helm.sh/chart") == "hellostateful-" + sys.argv[3], meta
            if not labels:
                del meta["labels"]
            if o["kind"] == "CustomResourceDefinition":
                assert meta["annotations"].pop("helm.sh/resource-policy") == "keep", meta
                if not meta["annotations"]:
                    del meta["annotations"]
            if o["kind"] == "Deployment" and meta["name"] == "hellostateful-reconciler":
                template = o["spec"]["template"]["metadata"]
                assert template["annotations"].pop("hello-stateful.example.com/settings")
                if not template["annotations"]:
                    del template["annotations"]
        key = (o["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in out, f"{key} twice"
        out[key] = plain(o)
    return out
chart, kustomize = objects(sys.argv[1], True), objects(sys.argv[2], False)
missing, extra = sorted(set(kustomize) - set(chart)), sorted(set(chart) - set(kustomize))
assert not missing and not extra, f"only kustomize: {missing}; only the chart: {extra}"
differ = [key for key in kustomize if chart[key] != kustomize[key]]
for key in differ:
    print("differs:", key, "\n chart:", chart[key], "\n kustomize:", kustomize[key])
assert not differ
print(len(chart), "objects alike")
EOF
}

test_the_chart_renders_what_kustomize_makes() {
  helm template "$RELEASE" "$CHART" -n "$RECONCILER_NS" >"$WORK/chart.yaml"
  kubectl kustomize "$E2E_ROOT/manifests" >"$WORK/kustomize.yaml"
  same_objects "$WORK/chart.yaml" "$WORK/kustomize.yaml"
  # With monitoring: what the kustomize component adds.
  helm template "$RELEASE" "$CHART" -n "$RECONCILER_NS" --set monitoring.enabled=true >"$WORK/chart.yaml"
  mkdir -p "$WORK/overlay"
  cp -r "$E2E_ROOT/manifests" "$WORK/overlay/base"
  printf 'resources: [base]\ncomponents: [base/monitoring]\n' >"$WORK/overlay/kustomization.yaml"
  kubectl kustomize "$WORK/overlay" >"$WORK/kustomize.yaml"
  same_objects "$WORK/chart.yaml" "$WORK/kustomize.yaml"
}

# rendered ARGS...: the chart rendered with the values ARGS set, as JSON objects, one a line.
rendered() {
  helm template "$RELEASE" "$CHART" -n "$RECONCILER_NS" "$@" |
    python3 -c 'import sys, yaml, json; [print(json.dumps(o)) for o in yaml.safe_load_all(sys.stdin) if o]'
}

test_values_reach_the_objects_and_bad_ones_are_refused() {
  local out image=registry.example/hs/hellostateful-reconciler
  out=$(rendered --set "image.repository=$image,image.digest=$DIGEST,image.pullPolicy=Always" \
    --set reconciler.replicas=2 --set admission.resources.requests.cpu=20m \
    --set-string settings.backupRoots=/srv/backups,settings.moverStartSeconds=90 --set crds.keep=false)
  # One image, by digest, everywhere it runs: both Deployments and every mover Job.
  jq -se --arg ref "$image@$DIGEST" '
    ([.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0] |
      select(.image == $ref and .imagePullPolicy == "Always")] | length == 2) and
    (.[] | select(.kind == "ConfigMap" and .metadata.name == "hellostateful-settings") |
      .data.moverImage == $ref and .data.backupRoots == "/srv/backups" and .data.moverStartSeconds == "90"
      and .data.staticDataVolumes == "allow") and
    (.[] | select(.metadata.name == "hellostateful-reconciler" and .kind == "Deployment") | .spec.replicas == 2) and
    (.[] | select(.metadata.name == "hellostateful-admission" and .kind == "Deployment") |
      .spec.replicas == 1 and .spec.template.spec.containers[0].resources == {requests: {cpu: "20m"}}) and
    (.[] | select(.kind == "CustomResourceDefinition") | .metadata.annotations == null)' <<<"$out" >/dev/null ||
    { echo "$out" | jq -c 'select(.kind == "Deployment" or .kind == "ConfigMap" or .kind == "CustomResourceDefinition") | {kind, metadata, spec: .spec.template.spec.containers?, data: .data?}'; return 1; }
  # A tag without a digest, the chart's appVersion by default.
  rendered --set image.repository=r.example/hs | jq -se --arg ref "r.example/hs:$HS_VERSION" '[.[] |
    select(.kind == "Deployment") | .spec.template.spec.containers[0].image == $ref] | all' >/dev/null
  # A change of the settings rolls the reconciler out; the same values do not.
  settings_mark() {
    rendered "$@" | jq -r 'select(.kind == "Deployment" and .metadata.name == "hellostateful-reconciler") |
      .spec.template.metadata.annotations["hello-stateful.example.com/settings"]'
  }
  [[ $(settings_mark) == "$(settings_mark)" ]]
  [[ $(settings_mark) != "$(settings_mark --set-string settings.moverStartSeconds=90)" ]]
  # Without the CRD, for clusters whose admin installs it apart.
  [[ $(rendered --set crds.install=false | jq -s '[.[] | select(.kind == "CustomResourceDefinition")] | length') == 0 ]]
  expect_fail "installs into the namespace hellostateful-system" helm template "$RELEASE" "$CHART" -n default
  expect_fail "settings.backupRoot is not a setting" helm template "$RELEASE" "$CHART" -n "$RECONCILER_NS" --set settings.backupRoot=/x
  expect_fail "is not sha256:<64 hex digits>" helm template "$RELEASE" "$CHART" -n "$RECONCILER_NS" --set image.repository=r,image.digest=sha256:abc
  expect_fail "need image.repository" helm template "$RELEASE" "$CHART" -n "$RECONCILER_NS" --set image.digest="$DIGEST"
}

# walkthrough NS: the 2018 walkthrough, as README's first command plays it, on the
# installed reconciler.
walkthrough() {
  # It runs the plugin of CARGO_TARGET_DIR/release: the one the suites test.
  mkdir -p "$WORK/target/release"
  ln -sf "$HS_PLUGIN" "$WORK/target/release/kubectl-hellostateful"
  CARGO_TARGET_DIR=$WORK/target WALKTHROUGH_SKIP_SETUP=1 WALKTHROUGH_CLEANUP=1 WALKTHROUGH_NAMESPACE=$1 \
    NO_COLOR=1 "$E2E_ROOT/e2e/walkthrough" >"$WORK/$1.log" 2>&1 ||
    { cat "$WORK/$1.log"; dump_debug "$1"; return 1; }
  tail -n 1 "$WORK/$1.log"
}

reconciler_ready() {
  [[ $(kubectl -n "$RECONCILER_NS" get deployment hellostateful-reconciler -o jsonpath='{.status.readyReplicas}/{.status.updatedReplicas}') == "$1/$1" ]]
}
reconcilers_one_leading() {
  [[ $(kubectl -n "$RECONCILER_NS" get deployment hellostateful-reconciler \
    -o jsonpath='{.status.replicas}/{.status.updatedReplicas}/{.status.readyReplicas}') == 2/2/1 ]]
}

test_helm_takes_over_the_install_upgrades_it_and_keeps_the_crd() {
  local before after kept_ns
  # What `kubectl hellostateful install` (or kubectl apply -k) made becomes the release's, as
  # README says: Helm adopts objects that carry its owner's label and annotations.
  kubectl kustomize "$E2E_ROOT/manifests" >"$WORK/objects.yaml"
  kubectl label --overwrite -f "$WORK/objects.yaml" app.kubernetes.io/managed-by=Helm >/dev/null
  kubectl annotate --overwrite -f "$WORK/objects.yaml" "meta.helm.sh/release-name=$RELEASE" \
    "meta.helm.sh/release-namespace=$RECONCILER_NS" >/dev/null
  # Client-side, as Helm 3 applies: Helm 4's server-side apply would leave every field that
  # kubectl applied (server-side) kubectl's too, and refuse to change it later. Its upgrades
  # follow the release's method. The suites' second backup root stays allowed (e2e/install's
  # settings).
  helm install "$RELEASE" "$CHART" -n "$RECONCILER_NS" --server-side=false \
    --set-string 'settings.backupRoots=/tmp/backup\,/tmp/hs-e2e-small' --wait --timeout 3m
  [[ $(helm status "$RELEASE" -n "$RECONCILER_NS") == *$'\nSTATUS: deployed\n'* ]]
  wait_for "the reconciler ready" 120 reconciler_ready 1
  walkthrough helm-installed

  before=$(kubectl -n "$RECONCILER_NS" get deployment hellostateful-reconciler -o jsonpath='{.spec.template.metadata.annotations}')
  # Not --wait: the replica that stands by is not Ready (its /readyz says so until it leads).
  helm upgrade "$RELEASE" "$CHART" -n "$RECONCILER_NS" --reuse-values --set reconciler.replicas=2 \
    --set-string settings.moverStartSeconds=45
  [[ $(kubectl -n "$RECONCILER_NS" get configmap hellostateful-settings -o jsonpath='{.data.moverStartSeconds}/{.data.backupRoots}') == 45//tmp/backup,/tmp/hs-e2e-small ]]
  after=$(kubectl -n "$RECONCILER_NS" get deployment hellostateful-reconciler -o jsonpath='{.spec.template.metadata.annotations}')
  [[ $before != "$after" ]] || { echo "the settings changed but the reconciler was not rolled out"; return 1; }
  # Two replicas of the new template: one leads (the Lease names it) and is Ready, the other
  # stands by.
  wait_for "two reconcilers, one leading" 120 reconcilers_one_leading
  [[ $(kubectl -n "$RECONCILER_NS" get lease -o jsonpath='{.items[*].spec.holderIdentity}') == *hellostateful-reconciler-* ]]
  [[ $(helm history "$RELEASE" -n "$RECONCILER_NS" -o json | jq length) == 2 ]]
  walkthrough helm-upgraded

  # Uninstalled: the CRD stays (deleting it would delete every app), with an app left in it.
  kept_ns=$(new_ns helm-kept)
  app_yaml kept '{"replicas": 1}' | kubectl -n "$kept_ns" apply -f - >/dev/null
  wait_for "kept Ready" 120 app_ready "$kept_ns" kept
  helm uninstall "$RELEASE" -n "$RECONCILER_NS" --wait --timeout 3m
  kubectl get crd hellostatefuls.hello-stateful.example.com >/dev/null
  kubectl -n "$kept_ns" get hellostateful kept >/dev/null
  [[ -z $(kubectl -n "$RECONCILER_NS" get deployments -o name) ]]
  # No reconciler is left to take its finalizer off: the test does, to leave nothing behind.
  kubectl -n "$kept_ns" patch hellostateful kept --type merge -p '{"metadata": {"finalizers": null}}' >/dev/null
  kubectl delete namespace "$kept_ns" --wait=false >/dev/null
}

run_test helm_tools test_helm_tools
run_test the_chart_lints test_the_chart_lints
run_test the_chart_renders_what_kustomize_makes test_the_chart_renders_what_kustomize_makes
run_test values_reach_the_objects_and_bad_ones_are_refused test_values_reach_the_objects_and_bad_ones_are_refused
run_test helm_takes_over_the_install_upgrades_it_and_keeps_the_crd test_helm_takes_over_the_install_upgrades_it_and_keeps_the_crd
summary

{{/*
The chart renders the objects of the repository's manifests/ (files/ is a link to it), so
that `helm install` and `kubectl hellostateful install` install the same thing; these
helpers apply the values to them.
*/}}

{{/* The image the values name, or "" to keep the manifests' own. */}}
{{- define "hellostateful.image" -}}
{{- with .Values.image -}}
{{- if .repository -}}
{{- if .digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .digest) -}}
{{- fail (printf "image.digest %q is not sha256:<64 hex digits>" .digest) -}}
{{- end -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository (default $.Chart.AppVersion .tag) -}}
{{- end -}}
{{- else if or .digest .tag -}}
{{- fail "image.tag and image.digest need image.repository" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The objects of files/FILE, each parsed: call with (list $ FILE). */}}
{{- define "hellostateful.objects" -}}
{{- $root := index . 0 -}}
{{- $file := index . 1 -}}
{{- $text := $root.Files.Get (printf "files/%s" $file) -}}
{{- if not $text -}}
{{- fail (printf "files/%s is missing: files/ must link to the repository's manifests/" $file) -}}
{{- end -}}
{{- $objects := list -}}
{{- range $document := regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $object := fromYaml $document -}}
{{- if hasKey $object "Error" -}}
{{- fail (printf "files/%s: %s" $file $object.Error) -}}
{{- end -}}
{{- if $object.kind -}}
{{- $objects = append $objects $object -}}
{{- end -}}
{{- end -}}
{{- toYaml $objects -}}
{{- end -}}

{{/* Applies the values to one object of the manifests (in place): call with (list $ OBJECT). */}}
{{- define "hellostateful.customize" -}}
{{- $root := index . 0 -}}
{{- $object := index . 1 -}}
{{- $values := $root.Values -}}
{{- $image := include "hellostateful.image" $root -}}
{{- $metadata := $object.metadata -}}
{{- $labels := default dict $metadata.labels -}}
{{- $_ := set $labels "app.kubernetes.io/managed-by" $root.Release.Service -}}
{{- $_ := set $labels "app.kubernetes.io/instance" $root.Release.Name -}}
{{- $_ := set $labels "helm.sh/chart" (printf "%s-%s" $root.Chart.Name $root.Chart.Version) -}}
{{- $_ := set $metadata "labels" $labels -}}
{{- if eq $object.kind "Deployment" -}}
{{- $part := ternary $values.reconciler $values.admission (eq $metadata.name "hellostateful-reconciler") -}}
{{- $_ := set $object.spec "replicas" (int $part.replicas) -}}
{{- $container := index $object.spec.template.spec.containers 0 -}}
{{- if $image -}}
{{- $_ := set $container "image" $image -}}
{{- end -}}
{{- if $values.image.pullPolicy -}}
{{- $_ := set $container "imagePullPolicy" $values.image.pullPolicy -}}
{{- end -}}
{{- if $part.resources -}}
{{- $_ := set $container "resources" $part.resources -}}
{{- end -}}
{{- /* The reconciler reads its settings when it starts: a change rolls it out. */ -}}
{{- if eq $metadata.name "hellostateful-reconciler" -}}
{{- $template := $object.spec.template.metadata -}}
{{- $annotations := default dict $template.annotations -}}
{{- $_ := set $annotations "hello-stateful.example.com/settings" (toJson (dict "settings" $values.settings "image" $image) | sha256sum) -}}
{{- $_ := set $template "annotations" $annotations -}}
{{- end -}}
{{- else if and (eq $object.kind "ConfigMap") (eq $metadata.name "hellostateful-settings") -}}
{{- range $key, $value := $values.settings -}}
{{- if not (kindIs "invalid" $value) -}}
{{- if not (hasKey $object.data $key) -}}
{{- fail (printf "settings.%s is not a setting of manifests/settings.yaml" $key) -}}
{{- end -}}
{{- $_ := set $object.data $key (toString $value) -}}
{{- end -}}
{{- end -}}
{{- if $image -}}
{{- $_ := set $object.data "moverImage" $image -}}
{{- end -}}
{{- else if eq $object.kind "CustomResourceDefinition" -}}
{{- if $values.crds.keep -}}
{{- $annotations := default dict $metadata.annotations -}}
{{- $_ := set $annotations "helm.sh/resource-policy" "keep" -}}
{{- $_ := set $metadata "annotations" $annotations -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "accelpolicy.labels" -}}
app.kubernetes.io/name: accelpolicy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component ("controller" or "agent"). */}}
{{- define "accelpolicy.selector" -}}
app.kubernetes.io/name: accelpolicy
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "accelpolicy.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "accelpolicy.rulesConfigMap" -}}
{{ .Values.rules.existingConfigMap | default "accelpolicy-rules" }}
{{- end -}}

{{/* Volume of the rules ConfigMap, its flattened keys mapped back to the rules/ tree. */}}
{{- define "accelpolicy.rulesVolume" -}}
{{- if or .Values.rules.fromChart .Values.rules.existingConfigMap }}
- name: rules
  configMap:
    name: {{ include "accelpolicy.rulesConfigMap" . }}
    {{- if not .Values.rules.existingConfigMap }}
    items:
      {{- range $rel, $_ := include "accelpolicy.ruleFiles" . | fromYaml }}
      - key: {{ $rel | replace "/" "__" }}
        path: {{ $rel }}
      {{- end }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* The rule files the chart mounts: rules/ (files/rules; .helmignore leaves rules/tests/ out) with
     rules.override on top; a YAML map "<path under rules/>": content. */}}
{{- define "accelpolicy.ruleFiles" -}}
{{- $files := dict }}
{{- range $path, $_ := .Files.Glob "files/rules/**.yaml" }}
{{- $_ := set $files (trimPrefix "files/rules/" $path) ($.Files.Get $path) }}
{{- end }}
{{- range $rel, $content := .Values.rules.override }}
{{- if or (not (hasSuffix ".yaml" $rel)) (hasPrefix "/" $rel) (contains ".." $rel) (contains "__" $rel) }}
{{- fail (printf "rules.override: %q is not a rule file path under rules/ (e.g. admission/settings.yaml)" $rel) }}
{{- end }}
{{- $_ := set $files $rel $content }}
{{- end }}
{{- toYaml $files }}
{{- end -}}

{{- define "accelpolicy.rulesMount" -}}
{{- if or .Values.rules.fromChart .Values.rules.existingConfigMap }}
- name: rules
  mountPath: /etc/accelpolicy/rules
  readOnly: true
{{- end }}
{{- end -}}

{{- define "accelpolicy.rulesArgs" -}}
{{- if or .Values.rules.fromChart .Values.rules.existingConfigMap }}
- --rules=/etc/accelpolicy/rules
{{- end }}
{{- end -}}

{{/* The Service every registered webhook calls (clientConfig.service): the policy
     accelpolicy-controller-scope lets the controller register webhooks pointing there only. */}}
{{- define "accelpolicy.webhookService" -}}
{{ .Values.controller.name }}
{{- end -}}

{{/* The settings store (rules/settings.yaml secretName; a test keeps them equal). */}}
{{- define "accelpolicy.settingsSecret" -}}
gpustack-settings
{{- end -}}

{{/* One rule document of the mounted rules (accelpolicy.ruleFiles), parsed: (dict "root" . "file"
     "controller.yaml" "kind" "ControllerPolicy"); fails naming the file when it has no such document. */}}
{{- define "accelpolicy.ruleDoc" -}}
{{- $files := include "accelpolicy.ruleFiles" .root | fromYaml }}
{{- $found := dict }}
{{- range $text := regexSplit "(?m)^---[ \t]*$" (get $files .file) -1 }}
{{- $doc := $text | fromYaml }}
{{- if eq (get $doc "kind") $.kind }}{{ $found = $doc }}{{ end }}
{{- end }}
{{- if not $found }}{{ fail (printf "rules/%s: no %s document (the chart reads its vocabulary from it)" .file .kind) }}{{ end }}
{{- $found | toYaml }}
{{- end -}}

{{/* The names and keys the admission policies and checks of this chart need, read from the rule files
     (each vocabulary has one home: rules/); a YAML map. */}}
{{- define "accelpolicy.vocabulary" -}}
{{- $controller := (include "accelpolicy.ruleDoc" (dict "root" . "file" "controller.yaml" "kind" "ControllerPolicy") | fromYaml).spec }}
{{- $agent := (include "accelpolicy.ruleDoc" (dict "root" . "file" "agent.yaml" "kind" "NodeAgent") | fromYaml).spec }}
{{- $labels := (include "accelpolicy.ruleDoc" (dict "root" . "file" "labels.yaml" "kind" "LabelCatalog") | fromYaml).spec }}
{{- $registration := (include "accelpolicy.ruleDoc" (dict "root" . "file" "admission/registration.yaml" "kind" "WebhookRegistration") | fromYaml).spec }}
{{- $instancePod := (include "accelpolicy.ruleDoc" (dict "root" . "file" "instances/pod.yaml" "kind" "InstancePod") | fromYaml).spec }}
{{- $instanceCrd := .Files.Get "files/crds/worker.gpustack.ai_instances.yaml" | fromYaml }}
{{- $storage := "" }}
{{- range $instanceCrd.spec.versions }}{{ if .storage }}{{ $storage = .name }}{{ end }}{{ end }}
{{- /* a capacity key template of rules/agent.yaml as an anchored regular expression: {base} is any extended
       resource name (bases can be overridden per node by GPUSTACK_<ID>_ACCELERATABLE_RESOURCE_NAME) */}}
{{- $capacity := list }}
{{- range $role, $template := $agent.capacity }}
{{- if kindIs "string" $template }}
{{- $re := regexQuoteMeta $template | replace "\\{base\\}" "[a-z0-9.-]+/[a-z0-9._-]+" | replace "\\{kind\\}" "[a-z0-9.-]+" | replace "\\{profile\\}" "[a-z0-9.-]+" }}
{{- $capacity = append $capacity (printf "^%s$" $re) }}
{{- end }}
{{- end }}
systemNamespace: {{ $controller.systemNamespace | quote }}
reservedNamespaces: {{ $controller.reservedNamespaces | toJson }}
nodeFeatureGroup: {{ regexReplaceAll "/[^/]*$" $agent.nodeFeature.apiVersion "" | quote }}
nodeFeaturePlural: {{ $agent.nodeFeature.plural | quote }}
nodeFeatureVersion: {{ regexReplaceAll "^.*/" $agent.nodeFeature.apiVersion "" | quote }}
nodeFeatureSuffixes: {{ list $agent.nodeFeature.worker.nameSuffix $agent.nodeFeature.deviceManager.nameSuffix | toJson }}
devicesGroup: {{ regexReplaceAll "/[^/]*$" $agent.devices.apiVersion "" | quote }}
devicesPlural: {{ $agent.devices.plural | quote }}
devicesVersion: {{ regexReplaceAll "^.*/" $agent.devices.apiVersion "" | quote }}
nodeFeatureNodeLabel: {{ $labels.keys.nodeFeatureNode | quote }}
nodeAnnotations: {{ list $labels.keys.cpuNameAnnotation $labels.keys.cpuFamilyAnnotation | toJson }}
podAnnotations: {{ list $labels.keys.allocation | toJson }}
queueLabel: {{ $labels.keys.queueName | quote }}
partOfLabel: {{ $labels.keys.partOf | quote }}
instanceApiVersion: {{ printf "%s/%s" $instanceCrd.spec.group $storage | quote }}
instancePodSpec: {{ $instancePod.podSpec | toJson }}
capacityKeys: {{ join "|" $capacity | quote }}
webhookConfigurations: {{ list $registration.configurations.mutating $registration.configurations.validating | toJson }}
{{- end -}}

{{/* Installs that cannot work are refused here, each with what to do instead. */}}
{{- define "accelpolicy.validate" -}}
{{- $v := include "accelpolicy.vocabulary" . | fromYaml }}
{{- if ne .Release.Namespace $v.systemNamespace }}
{{- fail (printf "namespace %q: accelpolicy installs into the rules' system namespace %q only (rules/controller.yaml systemNamespace: the admission rules trust system:serviceaccount:%s:%s, and nfd-master accepts NodeFeatures from there); use -n %s" .Release.Namespace $v.systemNamespace $v.systemNamespace .Values.controller.serviceAccountName $v.systemNamespace) }}
{{- end }}
{{- /* lookup answers only against a cluster (install/upgrade), never in `helm template` */}}
{{- $ns := lookup "v1" "Namespace" "" .Release.Namespace }}
{{- $level := dig "metadata" "labels" "pod-security.kubernetes.io/enforce" "" ($ns | default dict) }}
{{- if and $level (ne $level "privileged") }}
{{- fail (printf "namespace %s enforces Pod Security level %q: the agent DaemonSet needs \"privileged\" (a hostPath volume for the kubelet's PodResources socket, uid 0); run: kubectl label --overwrite namespace %s pod-security.kubernetes.io/enforce=privileged" .Release.Namespace $level .Release.Namespace) }}
{{- end }}
{{- end -}}

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
      {{- range $path, $_ := .Files.Glob "files/rules/**.yaml" }}
      {{- $rel := trimPrefix "files/rules/" $path }}
      - key: {{ $rel | replace "/" "__" }}
        path: {{ $rel }}
      {{- end }}
    {{- end }}
{{- end }}
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

{{/* The settings store (rules/settings.yaml secretName; a test keeps them equal). */}}
{{- define "accelpolicy.settingsSecret" -}}
gpustack-settings
{{- end -}}

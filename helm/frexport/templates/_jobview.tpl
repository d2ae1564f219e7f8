{{/*
The job-level view (docs/multi-node.md): a headless Service over one Job's sidecars and a
Deployment running `frexport jobview` against it. Rendered in either scope: it belongs to one job.
*/}}

{{/* The Job whose pods the view gathers: jobView.jobName, else the example Job. */}}
{{- define "frexport.jobView.jobName" -}}
{{- if .Values.jobView.jobName -}}
{{- .Values.jobView.jobName -}}
{{- else if .Values.example.enabled -}}
{{- include "frexport.example.name" . -}}
{{- else -}}
{{- fail "frexport: jobView.enabled needs jobView.jobName (the Job whose pods it gathers), or example.enabled" -}}
{{- end -}}
{{- end }}

{{/* The headless Service over that Job's sidecars: <job>-frexport (what --peers-service names). */}}
{{- define "frexport.jobView.serviceName" -}}
{{- printf "%s-frexport" (include "frexport.jobView.jobName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The view's Deployment: <job>-frexport-jobview. */}}
{{- define "frexport.jobView.name" -}}
{{- printf "%s-frexport-jobview" (include "frexport.jobView.jobName" . | trunc 46 | trimSuffix "-") }}
{{- end }}

{{/* Labels of the view's pods (its Deployment's selector, and the NetworkPolicy's source). */}}
{{- define "frexport.jobView.selectorLabels" -}}
app.kubernetes.io/name: {{ include "frexport.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: jobview
{{- end }}

{{/* Whether the sidecars serve the peers endpoint (/api/v1/ranks): jobView.enabled or sidecar.peersApi. */}}
{{- define "frexport.sidecar.peersApi" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
{{- if or $v.jobView.enabled $v.sidecar.peersApi -}}
{{- if and (not $v.webConfig.enabled) (not $v.jobView.allowUnauthenticated) -}}
{{- fail "frexport: the peers endpoint (jobView.enabled or sidecar.peersApi) serves every rank's recorder: set webConfig.enabled (TLS, basic auth) or, on a network nothing else reaches, jobView.allowUnauthenticated=true" -}}
{{- end -}}
true
{{- end -}}
{{- end }}

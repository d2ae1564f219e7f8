{{/*
Chart-internal helpers: names and labels of the objects this chart renders.
The templates that add the sidecar to a pod are in _sidecar.tpl.
*/}}

{{- define "frexport.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "frexport.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "frexport.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "frexport.labels" -}}
helm.sh/chart: {{ include "frexport.chart" . }}
app.kubernetes.io/name: {{ include "frexport.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The Prometheus meta label of a pod label: batch.kubernetes.io/job-name -> __meta_kubernetes_pod_label_batch_kubernetes_io_job_name */}}
{{- define "frexport.podLabelMeta" -}}
{{- printf "__meta_kubernetes_pod_label_%s" (regexReplaceAll "[^a-zA-Z0-9_]" . "_") }}
{{- end }}

{{/* Names of the example workload. */}}
{{- define "frexport.example.name" -}}
{{- printf "%s-example" (include "frexport.fullname" .) | trunc 52 | trimSuffix "-" }}
{{- end }}

{{/* The relabeling that sets `job` from the first non-empty of jobLabels (+ jobLabel). */}}
{{- define "frexport.jobRelabeling" -}}
{{- $labels := .Values.jobLabels | default list -}}
{{- if not (has .Values.jobLabel $labels) }}{{ $labels = append $labels .Values.jobLabel }}{{ end -}}
- sourceLabels:
  {{- range $labels }}
  - {{ include "frexport.podLabelMeta" . }}
  {{- end }}
  separator: ";"
  regex: "^;*([^;]+).*$"
  targetLabel: job
  replacement: "$1"
  action: replace
{{- end }}

{{/*
The chart's scope, by lifetime:
  shared   - the objects installed once per namespace (or cluster): PodMonitor/ServiceMonitor selecting
             every pod labelled podLabels, PrometheusRule, dashboards, NetworkPolicy, webhook.
  workload - nothing of the above: only the named templates (and the example) for one workload.
Empty (the default): shared when installed directly, workload when this chart is a dependency of
another chart (its templates then live under <parent>/charts/), so two workload charts that vendor
it never render a second set of monitors, rules or dashboards.
*/}}
{{- define "frexport.scope" -}}
{{- if .Values.scope -}}
{{- .Values.scope -}}
{{- else if contains "/charts/" .Template.BasePath -}}
workload
{{- else -}}
shared
{{- end -}}
{{- end }}

{{/* "true" when this release renders the shared objects (see frexport.scope). */}}
{{- define "frexport.shared" -}}
{{- if eq (include "frexport.scope" .) "shared" }}true{{ end -}}
{{- end }}

{{/* The monitors' endpoint fields that match the sidecar's web config: scheme, tlsConfig, basicAuth. */}}
{{- define "frexport.scrapeAuth" -}}
{{- $w := .Values.webConfig -}}
{{- if and $w.enabled $w.tls.enabled }}
scheme: https
tlsConfig:
  ca:
    secret:
      name: {{ $w.tls.secretName }}
      key: ca.crt
  {{- with $w.tls.serverName }}
  serverName: {{ . }}
  {{- end }}
  insecureSkipVerify: {{ $w.tls.insecureSkipVerify }}
{{- else }}
scheme: http
{{- end }}
{{- if and $w.enabled $w.basicAuth.enabled }}
basicAuth:
  username:
    name: {{ $w.basicAuth.secretName }}
    key: username
  password:
    name: {{ $w.basicAuth.secretName }}
    key: password
{{- end }}
{{- end }}

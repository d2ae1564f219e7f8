{{/* NOTES.txt body (a named template, so tests can render it without a cluster). */}}
{{- define "frexport.notes" -}}
frexport {{ .Chart.AppVersion }} ({{ include "frexport.fullname" . }} in namespace {{ .Release.Namespace }})

Rendered:
{{- if .Values.podMonitor.enabled }}
  - PodMonitor {{ include "frexport.fullname" . }}: scrapes port frexport-metrics of pods labelled {{ $pairs := list }}{{ range $k, $v := .Values.podLabels }}{{ $pairs = append $pairs (printf "%s=%s" $k $v) }}{{ end }}{{ join "," $pairs }}
    (`job` label = pod label {{ .Values.jobLabel }})
{{- end }}
{{- if .Values.serviceMonitor.enabled }}
  - ServiceMonitor {{ include "frexport.fullname" . }} and headless Service {{ include "frexport.fullname" . }}-metrics
{{- end }}
{{- if .Values.prometheusRule.enabled }}
  - PrometheusRule {{ include "frexport.fullname" . }}: the frexport alerts (FrexportRankStalled, ...)
{{- end }}
{{- if .Values.dashboards.enabled }}
  - Grafana dashboard ConfigMaps labelled {{ .Values.dashboards.label }}={{ .Values.dashboards.labelValue | quote }}
{{- end }}
{{- if .Values.example.enabled }}
  - Example Indexed Job {{ include "frexport.example.name" . }}: torchrun on {{ .Values.example.nodes }} pods
{{- end }}
{{- $unlabelled := list }}
{{- range $key := list "podMonitor" "serviceMonitor" "prometheusRule" }}
{{- $o := index $.Values $key }}
{{- if and $o.enabled (not (hasKey $o.additionalLabels "release")) }}{{ $unlabelled = append $unlabelled $key }}{{ end }}
{{- end }}
{{- if $unlabelled }}

WARNING, kube-prometheus-stack users: its Prometheus only picks up PodMonitors, ServiceMonitors and
PrometheusRules labelled `release: <kube-prometheus-stack release name>` (the default
*SelectorNilUsesHelmValues: true). Without it nothing is scraped or no alert loads. Not labelled:
{{ join ", " $unlabelled }}. Fix (from the frexport repository's root; or name the chart you installed,
e.g. oci://ghcr.io/frexport/charts/frexport --version {{ .Chart.Version }}):
  helm upgrade {{ .Release.Name }} ./helm/frexport -n {{ .Release.Namespace }} --reuse-values{{ range $unlabelled }} \
    --set {{ . }}.additionalLabels.release=kube-prometheus-stack{{ end }}
(or set prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues=false and
ruleSelectorNilUsesHelmValues=false in kube-prometheus-stack).
{{- end }}

Add the sidecar to your own training pods with the named templates (frexport.sidecar.initContainers,
frexport.sidecar.volumes, frexport.trainer.env, ...): see the chart's README.

Look at a sidecar's metrics:
{{- if .Values.example.enabled }}
  kubectl -n {{ .Release.Namespace }} port-forward pod/$(kubectl -n {{ .Release.Namespace }} get pod -l batch.kubernetes.io/job-name={{ include "frexport.example.name" . }} -o name | head -1 | cut -d/ -f2) {{ .Values.sidecar.port }}:{{ .Values.sidecar.port }}
{{- else }}
  kubectl -n {{ .Release.Namespace }} port-forward pod/<a training pod> {{ .Values.sidecar.port }}:{{ .Values.sidecar.port }}
{{- end }}
  curl -s http://127.0.0.1:{{ .Values.sidecar.port }}/metrics | grep '^frexport_'
  curl -s http://127.0.0.1:{{ .Values.sidecar.port }}/readyz

When a job hangs: `frexport_rank_status{status="stalled"}` names the culprit rank; the evidence bundle
is in {{ .Values.sharedDir }}/evidence of that pod's sidecar:
  kubectl -n {{ .Release.Namespace }} exec <pod> -c {{ .Values.sidecar.name }} -- ls {{ .Values.sharedDir }}/evidence
{{- end }}

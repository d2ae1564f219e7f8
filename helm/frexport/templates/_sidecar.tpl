{{/*
Named templates that add the frexport sidecar to a pod spec. They work from this chart and from a
chart that has frexport as a dependency (they then read the values under `.Values.frexport`). Pass
the root context `$`:

  metadata:
    labels: {{- include "frexport.pod.labels" $ | nindent 4 }}
  spec:
    securityContext: {{- include "frexport.pod.securityContext" $ | nindent 4 }}
    {{- include "frexport.pod.shareProcessNamespace" $ | nindent 2 }}
    initContainers: {{- include "frexport.sidecar.initContainers" $ | nindent 4 }}
    containers:
      - name: trainer
        command: {{- include "frexport.trainer.command" (dict "root" $ "command" (list "torchrun" "train.py")) | nindent 8 }}
        env: {{- include "frexport.trainer.env" $ | nindent 8 }}
        volumeMounts: {{- include "frexport.trainer.volumeMounts" $ | nindent 8 }}
      {{- include "frexport.sidecar.containers" $ | nindent 4 }}
    volumes: {{- include "frexport.sidecar.volumes" $ | nindent 4 }}

List templates render list items ("- name: ...") at column 0, ready for nindent.
*/}}

{{/* Sidecar image reference: repository@digest, else repository:tag (default: the frexport chart's appVersion). */}}
{{- define "frexport.image" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
{{- $app := .Chart.AppVersion -}}
{{- if and (kindIs "map" .Values.frexport) .Subcharts -}}
{{- with index .Subcharts "frexport" }}{{ $app = .Chart.AppVersion }}{{ end -}}
{{- end -}}
{{- if $v.image.digest -}}
{{- printf "%s@%s" $v.image.repository $v.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $v.image.repository (toString (default $app $v.image.tag)) -}}
{{- end -}}
{{- end }}

{{/* Arguments of `frexport serve`. */}}
{{- define "frexport.sidecar.args" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
- serve
- --sockets-dir
- {{ $v.sharedDir }}
- --dump-dir
- {{ $v.sharedDir }}/dumps
- --evidence-dir
- {{ $v.sharedDir }}/evidence
- --listen
- "[::]:{{ $v.sidecar.port }}"
{{- if ne $v.sidecar.logFormat "text" }}
- --log-format
- {{ $v.sidecar.logFormat }}
{{- end }}
{{- with $v.sidecar.stallAfter }}
- --stall-after
- {{ . | quote }}
{{- end }}
{{- with $v.sidecar.pollInterval }}
- --poll-interval
- {{ . | quote }}
{{- end }}
{{- if $v.sidecar.polling }}
- --polling
{{- end }}
{{- if $v.webConfig.enabled }}
- --web-config-file
- /etc/frexport/web/web-config.yml
{{- end }}
{{- if include "frexport.sidecar.peersApi" . }}
- --peers-api
{{- if not $v.webConfig.enabled }}
- --peers-api-unauthenticated
{{- end }}
{{- end }}
{{- range $v.sidecar.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* Probes of the sidecar. Basic auth covers every path and the kubelet cannot send a secret header
     without writing the password into the pod spec: tcpSocket then. TLS: HTTPS (the kubelet does not
     verify the certificate). */}}
{{- define "frexport.sidecar.probe" -}}
{{- $v := .v -}}
{{- $probe := deepCopy .probe -}}
{{- if and $v.webConfig.enabled $v.webConfig.basicAuth.enabled $probe.httpGet -}}
{{- $_ := set $probe "tcpSocket" (dict "port" $probe.httpGet.port) -}}
{{- $_ := unset $probe "httpGet" -}}
{{- else if and $v.webConfig.enabled $v.webConfig.tls.enabled $probe.httpGet -}}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" -}}
{{- end -}}
{{- toYaml $probe }}
{{- end }}

{{/* Environment of the sidecar: downward API, job id, py-spy, OTLP, extraEnv. */}}
{{- define "frexport.sidecar.env" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: FREXPORT_JOB_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['{{ $v.jobLabel }}']
{{- with $v.worldSize }}
- name: FREXPORT_WORLD_SIZE
  value: {{ . | quote }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE),k8s.node.name=$(NODE_NAME)
{{- if not $v.pyspy.enabled }}
- name: FREXPORT_EVIDENCE__PYSPY
  value: "false"
{{- end }}
{{- if $v.traces.enabled }}
- name: FREXPORT_TRACES__ENABLED
  value: "true"
- name: FREXPORT_TRACES__CHECKPOINT_FILE
  value: {{ $v.sharedDir }}/otlp-checkpoint.json
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $v.traces.otlp.endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $v.traces.otlp.protocol | quote }}
{{- with $v.traces.serviceName }}
- name: OTEL_SERVICE_NAME
  value: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" $v.traces.sampleRatio) }}
- name: OTEL_TRACES_SAMPLER
  value: parentbased_traceidratio
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ $v.traces.sampleRatio | toString | quote }}
{{- end }}
{{- end }}
{{- with $v.evidence.upload }}
{{- if .enabled }}
- name: FREXPORT_EVIDENCE__UPLOAD__ENDPOINT
  value: {{ .endpoint | quote }}
- name: FREXPORT_EVIDENCE__UPLOAD__BUCKET
  value: {{ .bucket | quote }}
- name: FREXPORT_EVIDENCE__UPLOAD__PREFIX
  value: {{ .prefix | quote }}
- name: FREXPORT_EVIDENCE__UPLOAD__REGION
  value: {{ .region | quote }}
- name: FREXPORT_EVIDENCE__UPLOAD__PATH_STYLE
  value: {{ .pathStyle | quote }}
{{- end }}
{{- end }}
{{- with $v.sidecar.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Security context of the sidecar: values, plus SYS_PTRACE with py-spy. */}}
{{- define "frexport.sidecar.securityContext" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
{{- $sc := deepCopy $v.sidecar.securityContext -}}
{{- if $v.pyspy.enabled -}}
{{- $caps := deepCopy ($sc.capabilities | default dict) -}}
{{- $_ := set $caps "add" (concat ($caps.add | default list) (list "SYS_PTRACE") | uniq) -}}
{{- $_ := set $sc "capabilities" $caps -}}
{{- end -}}
{{- toYaml $sc }}
{{- end }}

{{/* Fields shared by the native and the classic sidecar. */}}
{{- define "frexport.sidecar._common" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
image: {{ include "frexport.image" . }}
imagePullPolicy: {{ $v.image.pullPolicy }}
args:
  {{- include "frexport.sidecar.args" . | nindent 2 }}
env:
  {{- include "frexport.sidecar.env" . | nindent 2 }}
{{- if and $v.evidence.upload.enabled $v.evidence.upload.credentialsSecret }}
envFrom:
  # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN): frexport reads them itself
  - secretRef:
      name: {{ $v.evidence.upload.credentialsSecret }}
{{- end }}
ports:
  - name: frexport-metrics
    containerPort: {{ $v.sidecar.port }}
    protocol: TCP
{{- with $v.sidecar.livenessProbe }}
livenessProbe:
  {{- include "frexport.sidecar.probe" (dict "v" $v "probe" .) | nindent 2 }}
{{- end }}
{{- with $v.sidecar.readinessProbe }}
readinessProbe:
  {{- include "frexport.sidecar.probe" (dict "v" $v "probe" .) | nindent 2 }}
{{- end }}
resources:
  {{- toYaml $v.sidecar.resources | nindent 2 }}
securityContext:
  {{- include "frexport.sidecar.securityContext" . | nindent 2 }}
volumeMounts:
  - name: {{ $v.volume.name }}
    mountPath: {{ $v.sharedDir }}
  {{- if $v.evidence.persistence.enabled }}
  # a claim of its own over <sharedDir>/evidence, one directory per pod: bundles outlive the pod
  - name: frexport-evidence
    mountPath: {{ $v.sharedDir }}/evidence
    subPathExpr: {{ $v.evidence.persistence.subPathExpr }}
  {{- end }}
  {{- if $v.webConfig.enabled }}
  - name: frexport-web-config
    mountPath: /etc/frexport/web
    readOnly: true
  {{- if $v.webConfig.tls.enabled }}
  - name: frexport-web-tls
    mountPath: /etc/frexport/tls
    readOnly: true
  {{- end }}
  {{- end }}
{{- end }}

{{/* The sidecar as a native sidecar: an initContainers entry with restartPolicy: Always (Kubernetes >= 1.29). */}}
{{- define "frexport.sidecar.initContainer" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
{{- if not (semverCompare ">=1.29.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "frexport: sidecar.native needs Kubernetes >= 1.29 (native sidecars), this is %s: set sidecar.native=false" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
- name: {{ $v.sidecar.name }}
  restartPolicy: Always
  command:
    - frexport
  {{- include "frexport.sidecar._common" . | nindent 2 }}
  {{- if gt (int $v.sidecar.drainSeconds) 0 }}
  lifecycle:
    preStop:
      exec:
        command:
          - sleep
          - {{ $v.sidecar.drainSeconds | quote }}
  {{- end }}
{{- end }}

{{/* The sidecar as a classic container: serves until the trainer command ended (it touches
     <sharedDir>/.trainer-exited), then drainSeconds more, and exits 0 so the Job completes. */}}
{{- define "frexport.sidecar.container" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
- name: {{ $v.sidecar.name }}
  command:
    - /bin/sh
    - -c
    - |
      # A sidecar problem never fails the Job: frexport is restarted when it dies before the
      # trainer ended (e.g. OOM-killed), and this shell always exits 0.
      stop=0
      trap 'stop=1; kill -TERM "$pid" 2>/dev/null' TERM INT
      while [ "$stop" = 0 ]; do
        frexport "$@" &
        pid=$!
        while kill -0 "$pid" 2>/dev/null; do
          if [ -e {{ $v.sharedDir }}/.trainer-exited ]; then
            sleep {{ int $v.sidecar.drainSeconds }}
            stop=1
            kill -TERM "$pid" 2>/dev/null
            break
          fi
          sleep 2
        done
        wait "$pid"
        rc=$?
        while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done  # a trap ended the wait early
        [ "$rc" = 0 ] || echo "frexport-sidecar: frexport exited with $rc" >&2
        [ -e {{ $v.sharedDir }}/.trainer-exited ] && stop=1
        [ "$stop" = 0 ] && { echo "frexport-sidecar: restarting frexport" >&2; sleep 5; }
      done
      exit 0
    - frexport-sidecar
  {{- include "frexport.sidecar._common" . | nindent 2 }}
{{- end }}

{{/* Prepares the shared volume (dumps/ writable by any trainer user, evidence/) and, with
     agent.inject, copies frexport's agent and a frexport-launch wrapper for the trainer. */}}
{{- define "frexport.sidecar.prepareContainer" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
- name: {{ $v.sidecar.name }}-init
  image: {{ include "frexport.image" . }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  command:
    - python
    - -c
    - |
      import os, shutil
      shared = {{ $v.sharedDir | quote }}
      for sub in ("dumps", "evidence"):
          os.makedirs(os.path.join(shared, sub), exist_ok=True)
      os.chmod(os.path.join(shared, "dumps"), 0o1777)  # PyTorch writes here as the trainer's user
      {{- if $v.agent.inject }}
      import frexport
      dst = "/frexport-agent"
      shutil.rmtree(os.path.join(dst, "frexport"), ignore_errors=True)
      shutil.copytree(os.path.dirname(frexport.__file__), os.path.join(dst, "frexport"),
                      ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
      os.makedirs(os.path.join(dst, "bin"), exist_ok=True)
      launcher = os.path.join(dst, "bin", "frexport-launch")
      with open(launcher, "w") as f:
          f.write("#!/bin/sh\n"
                  "# frexport-launch, copied from the frexport " + frexport.__version__ + " image\n"
                  "export PYTHONPATH={{ $v.agent.mountPath }}${PYTHONPATH:+:$PYTHONPATH}\n"
                  "py=${FREXPORT_PYTHON:-python3}\n"
                  "command -v \"$py\" >/dev/null 2>&1 || py=python\n"
                  "exec \"$py\" -m frexport.agent.launch \"$@\"\n")
      os.chmod(launcher, 0o755)
      {{- end }}
  resources:
    {{- toYaml $v.sidecar.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.sidecar.securityContext | nindent 4 }}
  volumeMounts:
    - name: {{ $v.volume.name }}
      mountPath: {{ $v.sharedDir }}
    {{- if $v.agent.inject }}
    - name: {{ $v.agent.volumeName }}
      mountPath: /frexport-agent
    {{- end }}
{{- end }}

{{/* initContainers entries: the preparation step, then the native sidecar (sidecar.native). */}}
{{- define "frexport.sidecar.initContainers" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
{{ include "frexport.sidecar.prepareContainer" . }}
{{- if $v.sidecar.native }}
{{ include "frexport.sidecar.initContainer" . }}
{{- end }}
{{- end }}

{{/* containers entries: the classic sidecar when sidecar.native is false, else nothing. */}}
{{- define "frexport.sidecar.containers" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
{{- if not $v.sidecar.native }}
{{ include "frexport.sidecar.container" . }}
{{- end }}
{{- end }}

{{/* volumes entries: the shared emptyDir (dumps and sockets) and the agent volume. */}}
{{- define "frexport.sidecar.volumes" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
- name: {{ $v.volume.name }}
  emptyDir:
    {{- with $v.volume.medium }}
    medium: {{ . }}
    {{- end }}
    {{- with $v.volume.sizeLimit }}
    sizeLimit: {{ . }}
    {{- end }}
{{- if $v.agent.inject }}
- name: {{ $v.agent.volumeName }}
  emptyDir:
    sizeLimit: 64Mi
{{- end }}
{{- if $v.evidence.persistence.enabled }}
- name: frexport-evidence
  persistentVolumeClaim:
    claimName: {{ required "evidence.persistence.existingClaim: the ReadWriteMany claim the bundles go to" $v.evidence.persistence.existingClaim }}
{{- end }}
{{- if $v.webConfig.enabled }}
- name: frexport-web-config
  secret:
    secretName: {{ $v.webConfig.secretName }}
{{- if $v.webConfig.tls.enabled }}
- name: frexport-web-tls
  secret:
    secretName: {{ $v.webConfig.tls.secretName }}
{{- end }}
{{- end }}
{{- end }}

{{/* env entries of the trainer container. */}}
{{- define "frexport.trainer.env" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
- name: FREXPORT_AGENT_DIR
  value: {{ $v.sharedDir }}
- name: TORCH_FR_BUFFER_SIZE
  value: {{ $v.trainer.frBufferSize | quote }}
- name: TORCH_FR_DUMP_TEMP_FILE
  value: {{ $v.sharedDir }}/dumps/trace_
{{- if $v.trainer.legacyTorchEnv }}
- name: TORCH_NCCL_TRACE_BUFFER_SIZE
  value: {{ $v.trainer.frBufferSize | quote }}
- name: TORCH_NCCL_DEBUG_INFO_TEMP_FILE
  value: {{ $v.sharedDir }}/dumps/trace_
{{- end }}
{{- if $v.trainer.ncclEnableTiming }}
- name: TORCH_NCCL_ENABLE_TIMING
  value: "1"
{{- end }}
{{- with $v.trainer.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* volumeMounts entries of the trainer container. */}}
{{- define "frexport.trainer.volumeMounts" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
- name: {{ $v.volume.name }}
  mountPath: {{ $v.sharedDir }}
{{- if $v.agent.inject }}
- name: {{ $v.agent.volumeName }}
  mountPath: {{ $v.agent.mountPath }}
  readOnly: true
{{- end }}
{{- end }}

{{/* The trainer's command wrapped with `frexport-launch --dir <sharedDir> --` (loads frexport.agent in
     every rank). With a classic sidecar also in a shell that touches <sharedDir>/.trainer-exited
     when the command ends, so the sidecar exits too. Call with
     (dict "root" $ "command" (list "torchrun" ...)). */}}
{{- define "frexport.trainer.command" -}}
{{- $root := .root -}}
{{- $v := ternary $root.Values.frexport $root.Values (kindIs "map" $root.Values.frexport) -}}
{{- $launch := ternary (printf "%s/bin/frexport-launch" $v.agent.mountPath) "frexport-launch" $v.agent.inject -}}
{{- if not $v.sidecar.native -}}
- /bin/sh
- -c
- |
  {{ $launch }} --dir {{ $v.sharedDir }} -- "$@" &
  pid=$!
  trap 'kill -TERM "$pid" 2>/dev/null' TERM INT
  wait "$pid"
  rc=$?
  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
  touch {{ $v.sharedDir }}/.trainer-exited
  exit "$rc"
- frexport-trainer
{{- else -}}
- {{ $launch }}
- --dir
- {{ $v.sharedDir }}
- --
{{- end }}
{{- range .command }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* Trainer security context: the given one (dict "root" $ "securityContext" {...}), plus SYS_PTRACE with py-spy. */}}
{{- define "frexport.trainer.securityContext" -}}
{{- $root := .root -}}
{{- $v := ternary $root.Values.frexport $root.Values (kindIs "map" $root.Values.frexport) -}}
{{- $sc := deepCopy (.securityContext | default dict) -}}
{{- if $v.pyspy.enabled -}}
{{- $caps := deepCopy ($sc.capabilities | default dict) -}}
{{- $_ := set $caps "add" (concat ($caps.add | default list) (list "SYS_PTRACE") | uniq) -}}
{{- $_ := set $sc "capabilities" $caps -}}
{{- end -}}
{{- toYaml $sc }}
{{- end }}

{{/* Pod labels that the PodMonitor and the metrics Service select. */}}
{{- define "frexport.pod.labels" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
{{- toYaml $v.podLabels }}
{{- end }}

{{/* Pod security context: fsGroup shared by the trainer's files and the sidecar. */}}
{{- define "frexport.pod.securityContext" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
{{- toYaml $v.podSecurityContext }}
{{- end }}

{{/* `shareProcessNamespace: true` with py-spy, else nothing. */}}
{{- define "frexport.pod.shareProcessNamespace" -}}
{{- $v := ternary .Values.frexport .Values (kindIs "map" .Values.frexport) -}}
{{- if $v.pyspy.enabled }}shareProcessNamespace: true{{ end }}
{{- end }}

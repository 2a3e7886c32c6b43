{{/* The release's object names: the release name, with the chart's appended unless it holds it. */}}
{{- define "fencewatch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fencewatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "fencewatch.labels" -}}
app.kubernetes.io/part-of: fencewatch
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The job's pods. app.kubernetes.io/name is the PodMonitor's job label: `fencewatch`, the
     job the rules' FencewatchMonitorAbsent expects. */}}
{{- define "fencewatch.jobName" -}}
app.kubernetes.io/name: fencewatch
{{- end -}}

{{/* Selectors: the name and the release (objects' labels: fencewatch.labels and the name). */}}
{{- define "fencewatch.jobSelector" -}}
{{ include "fencewatch.jobName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fencewatch.bridgeName" -}}
app.kubernetes.io/name: fencewatch-bridge
{{- end -}}

{{- define "fencewatch.bridgeSelector" -}}
{{ include "fencewatch.bridgeName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Annotations for an annotation-scraping Prometheus: on the pods only (a Service annotated
     too would be a second path to the same pods). */}}
{{- define "fencewatch.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ . | quote }}
prometheus.io/path: /metrics
{{- end -}}

{{/* The job's credentials and optional secrets, from the user's Secret (never inlined). */}}
{{- define "fencewatch.jobSecretEnv" -}}
{{- if .Values.kafka.saslMechanism }}
- name: FENCEWATCH_STREAMING__KAFKA__SASL_USERNAME
  valueFrom: {secretKeyRef: {name: {{ .Values.secretName }}, key: job-sasl-username}}
- name: FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ .Values.secretName }}, key: job-sasl-password}}
{{- end }}
- name: FENCEWATCH_SINKS__GRAFANA_TOKEN
  valueFrom: {secretKeyRef: {name: {{ .Values.secretName }}, key: grafana-token, optional: true}}
- name: FENCEWATCH_STREAMING__SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO
  valueFrom: {secretKeyRef: {name: {{ .Values.secretName }}, key: schema-registry-user-info, optional: true}}
{{- end -}}

{{- define "fencewatch.validate" -}}
{{- if not (has .Values.mode (list "local" "sparkOperator")) -}}
{{- fail (printf "mode %q is not one of: local, sparkOperator" .Values.mode) -}}
{{- end -}}
{{- if not (has .Values.scrape.mode (list "podMonitor" "annotations" "none")) -}}
{{- fail (printf "scrape.mode %q is not one of: podMonitor, annotations, none" .Values.scrape.mode) -}}
{{- end -}}
{{- end -}}

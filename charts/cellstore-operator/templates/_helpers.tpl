{{- define "cellstore-operator.name" -}}cellstore-operator{{- end -}}

{{- define "cellstore-operator.fullname" -}}
{{- if contains "cellstore-operator" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-cellstore-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Cluster-scoped objects (ClusterRole, ClusterRoleBinding) carry the release namespace too, so two
releases of one name in different namespaces never collide. */}}
{{- define "cellstore-operator.clusterScopedName" -}}
{{- printf "%s-%s" (include "cellstore-operator.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cellstore-operator.selectorLabels" -}}
app.kubernetes.io/name: cellstore-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "cellstore-operator.labels" -}}
{{ include "cellstore-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "cellstore-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cellstore-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cellstore-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

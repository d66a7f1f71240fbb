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

{{/* GOMEMLIMIT of the manager, in bytes: 90% of resources.limits.memory, leaving the rest for what
the Go runtime does not count (stacks, fragmentation, cgo) before the kernel's OOM killer acts.
resourceFieldRef can only give the whole limit, so it is computed here from the value. Empty
without a memory limit (no GOMEMLIMIT: nothing to stay under). */}}
{{- define "cellstore-operator.goMemLimit" -}}
{{- $mem := dig "limits" "memory" "" (.Values.resources | default dict) -}}
{{- if not (kindIs "string" $mem) -}}
{{- $mem = toString (int64 $mem) -}}
{{- end -}}
{{- if $mem -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $mem) -}}
{{- fail (printf "resources.limits.memory %q: want a quantity such as 512Mi, 1Gi, 500M or bytes (GOMEMLIMIT is 90%% of it)" $mem) -}}
{{- end -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $mem -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 "E" 1000000000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "Ei" 1152921504606846976 -}}
{{- printf "%d" (int64 (floor (mulf (mulf (float64 $num) (get $units (trimPrefix $num $mem))) 0.9))) -}}
{{- end -}}
{{- end -}}

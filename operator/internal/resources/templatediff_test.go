package resources

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestDiffTemplates(t *testing.T) {
	base := func() *corev1.PodTemplateSpec {
		c := defaultedCluster()
		return &RegionServerStatefulSet(c, inputs(c, GroupRegionServer)).Spec.Template
	}
	tests := []struct {
		name   string
		change func(t *corev1.PodTemplateSpec)
		want   []string
	}{
		{"nothing", func(*corev1.PodTemplateSpec) {}, nil},
		{"memory limit", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("4Gi")
		}, []string{"spec.template.spec.containers[engine].resources.limits.memory"}},
		{"one flag", func(t *corev1.PodTemplateSpec) {
			for i, a := range t.Spec.Containers[0].Args {
				if a == "--heap-limit=768Mi" {
					t.Spec.Containers[0].Args[i] = "--heap-limit=1Gi"
				}
			}
		}, []string{"spec.template.spec.containers[engine].args[--heap-limit]"}},
		{"a flag added", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].Args = append(t.Spec.Containers[0].Args, "--new-flag=1")
		}, []string{"spec.template.spec.containers[engine].args[--new-flag]"}},
		{"image", func(t *corev1.PodTemplateSpec) { t.Spec.Containers[0].Image = "x:v2" },
			[]string{"spec.template.spec.containers[engine].image"}},
		{"env value", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].Env = append(t.Spec.Containers[0].Env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: "1"})
		}, []string{"spec.template.spec.containers[engine].env[GOMEMLIMIT]"}},
		{"volume added", func(t *corev1.PodTemplateSpec) {
			t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "hugepages", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: "HugePages-2Mi"}}})
		}, []string{"spec.template.spec.volumes[hugepages]"}},
		{"annotation with a slash", func(t *corev1.PodTemplateSpec) { t.Annotations["cellstore.io/config-hash"] = "x" },
			[]string{"spec.template.metadata.annotations[cellstore.io/config-hash]"}},
		{"two fields", func(t *corev1.PodTemplateSpec) {
			t.Spec.PriorityClassName = "high"
			t.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
		}, []string{"spec.template.spec.containers[engine].imagePullPolicy", "spec.template.spec.priorityClassName"}},
		{"toleration by position", func(t *corev1.PodTemplateSpec) {
			t.Spec.Tolerations = []corev1.Toleration{{Key: "a"}}
		}, []string{"spec.template.spec.tolerations"}},
		{"own hash ignored", func(t *corev1.PodTemplateSpec) { t.Annotations[AnnotationTemplateHash] = "other" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := base(), base()
			tt.change(b)
			got := DiffTemplates(a, b)
			if !slices.Equal(got, tt.want) {
				t.Errorf("diff %q, want %q", got, tt.want)
			}
			if (TemplateHash(a) == TemplateHash(b)) != (len(tt.want) == 0) {
				t.Errorf("hashes equal = %v, want %v", TemplateHash(a) == TemplateHash(b), len(tt.want) == 0)
			}
		})
	}
}

package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// TemplateHash is the hash of a rendered pod template, without its own hash annotation. Equal
// templates have equal hashes, whatever the operator version that rendered them.
func TemplateHash(t *corev1.PodTemplateSpec) string {
	c := t.DeepCopy()
	delete(c.Annotations, AnnotationTemplateHash)
	if len(c.Annotations) == 0 {
		c.Annotations = nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		// A PodTemplateSpec always marshals; keep a distinct, stable value if it ever does not.
		return "unhashable"
	}
	return shortHash(b)
}

func shortHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// DiffTemplates lists the fields that differ between two rendered pod templates, as paths such as
// spec.template.spec.containers[engine].resources.limits.memory. Lists of named items (containers,
// volumes, env, ports, mounts) are matched by name, and argument lists by flag, so a path says
// which item changed rather than which position.
func DiffTemplates(old, cur *corev1.PodTemplateSpec) []string {
	a, errA := toGeneric(old)
	b, errB := toGeneric(cur)
	if errA != nil || errB != nil {
		return []string{"spec.template"}
	}
	var out []string
	diffValues("spec.template", a, b, &out)
	sort.Strings(out)
	return slices.Compact(out)
}

func toGeneric(t *corev1.PodTemplateSpec) (any, error) {
	c := t.DeepCopy()
	delete(c.Annotations, AnnotationTemplateHash)
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var v any
	err = json.Unmarshal(b, &v)
	return v, err
}

func diffValues(path string, a, b any, out *[]string) {
	if reflect.DeepEqual(a, b) {
		return
	}
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if aIsMap && bIsMap {
		keys := slices.Sorted(maps.Keys(am))
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			diffValues(joinField(path, k), am[k], bm[k], out)
		}
		return
	}
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if aIsList && bIsList || aIsList && b == nil || a == nil && bIsList {
		if ka, kb, ok := keyedItems(al, bl); ok {
			keys := slices.Sorted(maps.Keys(ka))
			for k := range kb {
				if _, ok := ka[k]; !ok {
					keys = append(keys, k)
				}
			}
			for _, k := range keys {
				diffValues(path+"["+k+"]", ka[k], kb[k], out)
			}
			return
		}
		if len(al) == len(bl) {
			for i := range al {
				diffValues(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], out)
			}
			return
		}
	}
	*out = append(*out, path)
}

// joinField appends a map key to a path; keys that are not plain identifiers (annotation and label
// keys, resource names) are written in brackets.
func joinField(path, k string) string {
	if k == "" || strings.ContainsAny(k, "./[]") {
		return path + "[" + k + "]"
	}
	return path + "." + k
}

// keyedItems indexes two lists by the items' names (maps with a "name" field) or, for lists of
// "--flag=value" strings, by flag (other strings by position). ok is false when the lists are not of such items or have
// duplicate keys.
func keyedItems(a, b []any) (ka, kb map[string]any, ok bool) {
	if len(a) == 0 && len(b) == 0 {
		return nil, nil, false
	}
	ka, okA := keyList(a)
	kb, okB := keyList(b)
	return ka, kb, okA && okB
}

func keyList(l []any) (map[string]any, bool) {
	m := make(map[string]any, len(l))
	for i, it := range l {
		var key string
		switch v := it.(type) {
		case map[string]any:
			name, ok := v["name"].(string)
			if !ok {
				// volumeMounts: keyed by mount path
				if mp, ok2 := v["mountPath"].(string); ok2 {
					name = mp
				} else {
					return nil, false
				}
			}
			key = name
		case string:
			if strings.HasPrefix(v, "--") {
				key, _, _ = strings.Cut(v, "=")
			} else {
				key = fmt.Sprint(i) // a positional argument (the subcommand)
			}
		default:
			return nil, false
		}
		if _, dup := m[key]; dup {
			return nil, false
		}
		m[key] = it
	}
	return m, true
}

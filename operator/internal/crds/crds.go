// Package crds applies the operator's CustomResourceDefinitions to a cluster, for the chart's
// upgrade hook (Helm never upgrades a chart's crds/).
package crds

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// FieldOwner is the field manager of the applied CRDs.
const FieldOwner = "cellstore-operator-crds"

// Load reads the CRDs of a directory of YAML files (one CRD each).
func Load(fsys fs.FS) ([]*unstructured.Unstructured, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".yaml" {
			continue
		}
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		if u.GetKind() != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: a %s, not a CustomResourceDefinition", e.Name(), u.GetKind())
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errors.New("no CustomResourceDefinition to apply")
	}
	return out, nil
}

// Apply applies each CRD (server-side apply, taking over the fields Helm's first install or
// kubectl set) and waits until the API server serves them all (Established), within timeout.
// progress is told what happens.
func Apply(ctx context.Context, c client.Client, defs []*unstructured.Unstructured, timeout time.Duration, progress func(string)) error {
	for _, d := range defs {
		obj := d.DeepCopy()
		obj.SetManagedFields(nil)
		obj.SetResourceVersion("")
		if err := c.Patch(ctx, obj, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply CustomResourceDefinition %s: %w", d.GetName(), err)
		}
		progress("applied CustomResourceDefinition " + d.GetName())
	}
	for _, d := range defs {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(d.GroupVersionKind())
			if err := c.Get(ctx, client.ObjectKey{Name: d.GetName()}, cur); err != nil {
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
			for _, cd := range conds {
				m, _ := cd.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CustomResourceDefinition %s is not served (Established) after %s: %w", d.GetName(), timeout, err)
		}
	}
	progress("every CustomResourceDefinition is served: " + names(defs))
	return nil
}

func names(defs []*unstructured.Unstructured) string {
	n := make([]string, len(defs))
	for i, d := range defs {
		n[i] = d.GetName()
	}
	return strings.Join(n, ", ")
}

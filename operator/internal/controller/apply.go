package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldOwner is the server-side apply field manager of the StoreCluster controller.
const FieldOwner = "cellstore-operator"

// applyResult says what an apply did.
type applyResult int

const (
	applyUnchanged applyResult = iota
	applyCreated
	applyUpdated
)

// toApplyObject turns a typed object into the unstructured body of a server-side apply: status and
// the null creationTimestamps of typed objects are dropped, so the operator owns only what it sets.
func toApplyObject(obj client.Object) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.DeepCopy(), nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T %s: %w", obj, obj.GetName(), err)
	}
	delete(m, "status")
	dropNulls(m)
	return &unstructured.Unstructured{Object: m}, nil
}

func dropNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			dropNulls(e)
		}
	case []any:
		for _, e := range t {
			dropNulls(e)
		}
	}
}

// applyObject server-side applies obj with the operator's field manager, taking over fields
// others changed. expectRV, when set, is the resourceVersion the caller based its decisions on: the
// apply then fails with a conflict if the object changed since. It returns the object as stored.
func applyObject(ctx context.Context, c client.Client, obj client.Object, expectRV string) (*unstructured.Unstructured, error) {
	u, err := toApplyObject(obj)
	if err != nil {
		return nil, err
	}
	gvk := u.GroupVersionKind()
	if expectRV != "" {
		u.SetResourceVersion(expectRV)
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	return u, nil
}

func classify(beforeRV, afterRV string) applyResult {
	switch {
	case beforeRV == "":
		return applyCreated
	case beforeRV != afterRV:
		return applyUpdated
	}
	return applyUnchanged
}

// currentRV reads an object's resourceVersion from the API server ("" when it does not exist), so
// that a change is reported exactly once even when the cache lags.
func currentRV(ctx context.Context, r client.Reader, obj client.Object) (string, error) {
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	switch err := r.Get(ctx, client.ObjectKeyFromObject(obj), existing); {
	case err == nil:
		return existing.GetResourceVersion(), nil
	case apierrors.IsNotFound(err):
		return "", nil
	default:
		return "", fmt.Errorf("read %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
	}
}

// applyTracked applies obj and says whether it created or changed it.
func applyTracked(ctx context.Context, c client.Client, reader client.Reader, obj client.Object) (applyResult, error) {
	before, err := currentRV(ctx, reader, obj)
	if err != nil {
		return applyUnchanged, err
	}
	out, err := applyObject(ctx, c, obj, "")
	if err != nil {
		return applyUnchanged, err
	}
	return classify(before, out.GetResourceVersion()), nil
}

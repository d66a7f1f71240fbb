// Package v1alpha1 holds the cellstore.io/v1alpha1 API: StoreCluster, one Cellstore store (masters,
// region servers, shared storage) run by the operator.
//
// +kubebuilder:object:generate=true
// +groupName=cellstore.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is cellstore.io/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "cellstore.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

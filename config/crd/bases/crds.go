// Package bases holds the CustomResourceDefinitions controller-gen makes from operator/api
// (`make manifests`), embedded so that the operator can apply them itself: the chart's
// pre-install/pre-upgrade hook runs `manager --apply-crds` (docs/operator.md, "Upgrades").
package bases

import "embed"

// FS holds the CRDs, one YAML file each.
//
//go:embed *.yaml
var FS embed.FS

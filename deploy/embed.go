// Package deploy holds hvkube's manifests for Kubernetes; it gives the
// binary the CustomResourceDefinitions generated into crds/, so that
// `hvkube crds` and the API servers install exactly what is checked in.
package deploy

import "embed"

// CRDs are the generated CustomResourceDefinitions, one file per kind.
//
//go:embed crds/*.yaml
var CRDs embed.FS

// Package apiload loads package api for the generators that read its Go
// types (the CRDs, the deep copies), with controller-tools' loader.
package apiload

import (
	"errors"
	"fmt"

	"golang.org/x/tools/go/packages"
	"sigs.k8s.io/controller-tools/pkg/loader"
)

// Load loads ./internal/api under the module root.
func Load(root string) ([]*loader.Package, error) {
	pkgs, err := loader.LoadRootsWithConfig(&packages.Config{Dir: root}, "./internal/api")
	if err != nil {
		return nil, fmt.Errorf("load the api package: %w", err)
	}
	return pkgs, nil
}

// Errors joins the errors a generator left on pkgs. Type errors are not
// among them: the type checker follows only what the types refer to, so
// the rest of the package (function bodies, variables) is left
// unresolved on purpose.
func Errors(pkgs []*loader.Package) error {
	var errs []error
	for _, pkg := range pkgs {
		for _, e := range pkg.Errors {
			if e.Kind != packages.TypeError {
				errs = append(errs, e)
			}
		}
	}
	return errors.Join(errs...)
}

// Package qemutest helps the tests of other packages that run the QEMU
// backend for real: they need a guest image that `make image` builds.
package qemutest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hvkube/hvkube/internal/drivers/qemu"
)

// requirements says, per image flavor, which variable turns a missing
// image into a failure and what builds it.
var requirements = map[string]struct{ env, make string }{
	"linux-desktop":   {"HVKUBE_REQUIRE_QEMU", "make image"},
	"browser-desktop": {"HVKUBE_REQUIRE_BROWSER_IMAGE", "make image-browser"},
	"osworld":         {"HVKUBE_REQUIRE_OSWORLD_IMAGE", "make image-osworld"},
}

// RequireImage returns the image directory holding flavor, or skips t when
// that image is not built, unless its variable (make test sets them) says
// a missing image is a failure.
func RequireImage(t testing.TB, flavor string) string {
	t.Helper()
	req, ok := requirements[flavor]
	if !ok {
		t.Fatalf("qemutest: no image flavor %q", flavor)
	}
	dir := qemu.DefaultImageDir()
	if _, err := os.Stat(filepath.Join(dir, flavor, "current", "image.json")); err != nil {
		if os.Getenv(req.env) != "" {
			t.Fatalf("the %s image is not built (%v): run %s", flavor, err, req.make)
		}
		t.Skipf("the %s image is not built: run %s (%v)", flavor, req.make, err)
	}
	return dir
}

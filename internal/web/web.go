// Package web holds the dashboard's files, embedded in the binary.
//
// `make web` (npm ci and npm run build in web/) writes the built dashboard
// to dist/app, which git ignores. Without it, as in a fresh clone, the
// binary still builds and serves dist/index.html, a page that says how to
// build the dashboard.
package web

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Files returns the dashboard's files (index.html and ui/…) and whether
// they are the built dashboard rather than the placeholder page.
func Files() (fs.FS, bool) {
	if _, err := fs.Stat(dist, "dist/app/index.html"); err == nil {
		sub, err := fs.Sub(dist, "dist/app")
		if err == nil {
			return sub, true
		}
	}
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: it exists
	}
	return sub, false
}

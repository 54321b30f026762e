// Package console holds tierbucket's web console, built from the Vue sources in this directory
// (npm run build) into dist/, which is committed: building Caddy needs no Node.
package console

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Files is the built console: index.html and assets/.
func Files() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // "dist" is a valid path and embedded at build time
	}
	return sub
}

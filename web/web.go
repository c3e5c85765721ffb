// Package web embeds the shopper and admin pages served by the api.
package web

import "embed"

// Files holds index.html, admin.html, monitor.html and assets/.
//
//go:embed index.html admin.html monitor.html assets
var Files embed.FS

// Package lua holds flashsale's Redis scripts: one folder per owning Go package
// (inventory/purchase.lua) and lib/ for the libraries several scripts share. The owning
// package declares its scripts in its scripts.go; internal/exactlyonce runs them.
package lua

import "embed"

// FS holds every script by its path under lua/, as "inventory/purchase.lua".
//
//go:embed */*.lua
var FS embed.FS

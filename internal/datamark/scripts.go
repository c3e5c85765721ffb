package datamark

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The data marker's script (lua/datamark/), wrapped by one function of this package.
// NewChange marks a state change a client is answered for; New, one that is not.
var (
	script = exactlyonce.NewChange("datamark", "datamark/datamark.lua")
)

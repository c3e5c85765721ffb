package limits

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The limiter's script (lua/limits/), wrapped by one function of this package; the GCRA
// library (lua/lib/gcra.lua) goes in front, shared with the purchase.
// NewChange marks a state change a client is answered for; New, one that is not.
var (
	script = exactlyonce.New("limit", "lib/gcra.lua", "limits/limit.lua")
)

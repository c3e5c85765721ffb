package outbox

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The relay's scripts (lua/outbox/), each wrapped by one function of this package.
// NewChange marks a state change a client is answered for; New, one that is not.
var (
	// ackScript acknowledges published entries and removes them from the stream.
	ackScript = exactlyonce.New("outbox_ack", "outbox/ack.lua")
	// confirmScript: its run and the WAIT behind it confirm that the replicas hold what the
	// stream held before it.
	confirmScript = exactlyonce.NewChange("outbox_confirm", "outbox/confirm.lua")
)

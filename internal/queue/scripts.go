package queue

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The waiting room's scripts (lua/), each wrapped by one function of this package.
var (
	joinScript  = exactlyonce.New("queue_join", "queue/ticket.lua", "queue/join.lua")
	admitScript = exactlyonce.NewChange("queue_admit", "queue/ticket.lua", "queue/admit.lua")
)

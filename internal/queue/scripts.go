package queue

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The waiting room's scripts (lua/queue/), each wrapped by one function of this package;
// ticket.lua (the ticket's packing) goes in front of each.
// NewChange marks a state change a client is answered for; New, one that is not.
var (
	joinScript  = exactlyonce.New("queue_join", "queue/ticket.lua", "queue/join.lua")
	admitScript = exactlyonce.NewChange("queue_admit", "queue/ticket.lua", "queue/admit.lua")
)

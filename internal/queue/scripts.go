package queue

import "github.com/flashsale/flashsale/lua"

// The waiting room's scripts (lua/), each wrapped by one function of this package.
var (
	joinScript  = lua.New("queue_join", "queue_ticket.lua", "queue_join.lua")
	admitScript = lua.NewChange("queue_admit", "queue_ticket.lua", "queue_admit.lua")
)

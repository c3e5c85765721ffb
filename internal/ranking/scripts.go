package ranking

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The ranking's scripts (lua/ranking/), each wrapped by one function of this package;
// board.lua (the bounded-board functions) goes in front of each.
// NewChange marks a state change a client is answered for; New, one that is not.
var (
	rateScript         = exactlyonce.NewChange("rank_rate", "ranking/board.lua", "ranking/rate.lua")
	soldScript         = exactlyonce.New("rank_sold", "ranking/board.lua", "ranking/sold.lua")
	recategorizeScript = exactlyonce.NewChange("rank_recategorize", "ranking/board.lua", "ranking/recategorize.lua")
)

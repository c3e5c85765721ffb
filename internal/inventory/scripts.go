package inventory

import "github.com/flashsale/flashsale/lua"

// The inventory's scripts (lua/), each wrapped by one function of this package.
var (
	purchaseScript    = lua.NewChange("purchase", "gcra.lua", "changed.lua", "purchase.lua")
	upsertItemScript  = lua.NewChange("upsert_item", "changed.lua", "upsert_item.lua")
	adjustStockScript = lua.NewChange("adjust_stock", "changed.lua", "adjust_stock.lua")
)

package inventory

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The inventory's scripts (lua/inventory/), each wrapped by one function of this package;
// the purchase has the GCRA library (lua/lib/gcra.lua) in front, shared with the limiter.
// NewChange marks a state change a client is answered for; New, one that is not.
var (
	purchaseScript    = exactlyonce.NewChange("purchase", "lib/gcra.lua", "lib/changed.lua", "inventory/purchase.lua")
	upsertItemScript  = exactlyonce.NewChange("upsert_item", "lib/changed.lua", "inventory/upsert_item.lua")
	adjustStockScript = exactlyonce.NewChange("adjust_stock", "lib/changed.lua", "inventory/adjust_stock.lua")
	archiveItemScript = exactlyonce.NewChange("archive_item", "lib/changed.lua", "inventory/archive.lua")
)

package inventory

// The scripts, for the tests that call them with malformed arguments directly.
var (
	PurchaseScript    = purchaseScript
	UpsertItemScript  = upsertItemScript
	AdjustStockScript = adjustStockScript
)

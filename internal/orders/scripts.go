package orders

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The orders' scripts (lua/orders/), each wrapped by one function of this package;
// release.lua is their shared "give stock and allowance back". Paying by a provider's word
// goes through payScript, the same path as the shopper's pay.
// NewChange marks a state change a client is answered for; New, one that is not.
var (
	payScript    = exactlyonce.NewChange("pay", "orders/release.lua", "lib/changed.lua", "orders/pay.lua")
	cancelScript = exactlyonce.NewChange("cancel", "orders/release.lua", "lib/changed.lua", "orders/cancel.lua")
	expireScript = exactlyonce.NewChange("expire", "orders/release.lua", "lib/changed.lua", "orders/expire.lua")

	attachPaymentScript = exactlyonce.NewChange("attach_payment", "orders/release.lua", "orders/attach_payment.lua")
	refundPaymentScript = exactlyonce.NewChange("refund_payment", "orders/release.lua", "orders/refund_payment.lua")
	paymentStatusScript = exactlyonce.NewChange("payment_status", "orders/release.lua", "orders/payment_status.lua")
	refundOrderScript   = exactlyonce.NewChange("refund_order", "orders/release.lua", "lib/changed.lua", "orders/refund_order.lua")

	// "My orders": a read-only script per item, and the conditional delete of index fields
	// that name no order. Both are safe to repeat, so they keep no call record.
	listScript   = exactlyonce.NewIdempotent("list", "orders/list.lua")
	unlistScript = exactlyonce.NewIdempotent("unlist", "orders/unlist.lua")
)

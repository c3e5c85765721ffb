package reconcile

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The reconciler's scripts (lua/reconcile/), each wrapped by one function of this package.
// NewChange marks a state change a client is answered for; New, one that is not.
var (
	pruneScript        = exactlyonce.NewChange("prune", "reconcile/prune.lua")
	prunePaymentScript = exactlyonce.New("prune_payment_index", "reconcile/prune_payment_index.lua")
	reemitScript       = exactlyonce.NewChange("reconcile_reemit", "reconcile/reemit.lua")

	restoreBegin  = exactlyonce.NewChange("restore_begin", "lib/changed.lua", "reconcile/restore_begin.lua")
	restorePut    = exactlyonce.NewChange("restore_put", "reconcile/restore_put.lua")
	restoreFinish = exactlyonce.NewChange("restore_finish", "lib/changed.lua", "reconcile/restore_finish.lua")
)

package inventory

import (
	"context"
	"strconv"
)

// The scripts, for the tests that call them with malformed arguments directly.
var (
	PurchaseScript    = purchaseScript
	UpsertItemScript  = upsertItemScript
	AdjustStockScript = adjustStockScript
)

// Refresh runs one snapshot refresh now.
func (s *Store) Refresh(ctx context.Context) error { return s.refresh(ctx) }

// HoldSweep gives the sweep a long list of ids that do not exist, so the refreshes of a test
// bring only what the change logs tell.
func (s *Store) HoldSweep() {
	for i := range 100000 {
		s.sweep.pending = append(s.sweep.pending, "none"+strconv.Itoa(i))
	}
}

package inventory

import "time"

// soldOutTrust is how long one observation of "no stock left" may answer purchases from
// memory. Each mark carries the time Redis was asked, so stock that comes back at T on any
// instance is sold again by T+soldOutTrust at the latest, even when the snapshot stalls.
// Each snapshot renews or drops the marks; this instance's own writes drop them at once.
const soldOutTrust = time.Second

// The sold-out short cut: s.soldOut maps item id -> time.Time until which the item may be
// answered sold_out without a Redis call.

// KnownSoldOut reports whether this instance knows, recently enough, that the item has no
// stock left during its sale.
func (s *Store) KnownSoldOut(item string) bool {
	v, ok := s.soldOut.Load(item)
	return ok && time.Now().Before(v.(time.Time))
}

// ForgetSoldOut drops the sold-out mark of an item whose stock came back (cancel, expiry,
// restock on this instance); other instances learn it from their next snapshot.
func (s *Store) ForgetSoldOut(item string) { s.soldOut.Delete(item) }

// markSoldOut records that Redis, asked at seen, had no stock left for an item on sale. The
// mark ends at the sale's end, where purchases must get sale_ended from the script instead.
func (s *Store) markSoldOut(item string, seen time.Time, ends *time.Time) {
	until := seen.Add(soldOutTrust)
	if ends != nil && ends.Before(until) {
		until = *ends
	}
	s.soldOut.Store(item, until)
}

// observeStock updates the short cut from an item read at seen (a snapshot): stock left
// drops the mark; no stock during the sale window renews or sets it; outside the window the
// script's answer (sale_not_started, sale_ended) must win, so there is no mark.
func (s *Store) observeStock(it Item, seen time.Time) {
	if it.StockLeft > 0 || it.StatusAt(seen) != StatusSoldOut {
		s.soldOut.Delete(it.ID)
		return
	}
	s.markSoldOut(it.ID, seen, it.EndsAt)
}

// saleEnd returns the item's sale end from the snapshot (nil when none or unknown).
func (s *Store) saleEnd(item string) *time.Time {
	s.snapMu.RLock()
	defer s.snapMu.RUnlock()
	return s.snap[item].EndsAt
}

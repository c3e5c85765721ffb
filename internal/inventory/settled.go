package inventory

import (
	"context"
	"sync"
	"time"

	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/orders"
)

// A shopper over an item's purchase limit is answered from memory until she may try again
// (limits.Refusals). A replay of a key this api has answered reads only its order, not the
// script: the first replay always, then at most once per ReplayFresh. Both memories are bounded.

// ReplayFresh is how long a settled key's order, as read last, answers its replays.
const ReplayFresh = time.Second

// settledKept bounds the settled idempotency keys an api remembers, and refusalsKept the
// refused (shopper, item) pairs.
const (
	settledKept  = 100_000
	refusalsKept = 100_000
)

// settledKeys maps a shopper's settled Idempotency-Key (per item) to its order id, until the
// key's idempotency window ends; only the order's current state is read from Redis.
type settledKeys struct {
	mu sync.Mutex
	m  map[settledKey]settledOrder
}

type settledKey struct{ user, item, key string }

type settledOrder struct {
	id    string
	until time.Time // the key's record expires then: a later request is a new purchase
	order orders.Order
	fresh time.Time // order answers replays until then
}

func (s *settledKeys) remember(req PurchaseRequest, o orders.Order, window time.Duration) {
	if req.IdempotencyKey == "" || o.ID == "" {
		return
	}
	until := o.CreatedAt.Add(window)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[settledKey]settledOrder{}
	}
	if len(s.m) >= settledKept {
		for k, v := range s.m {
			if !now.Before(v.until) || len(s.m) >= settledKept {
				delete(s.m, k) // expired ones, and at least one other
			}
			if len(s.m) < settledKept*9/10 {
				break
			}
		}
	}
	// Not fresh yet: the first replay reads the order, so it shows what became of it since.
	s.m[settledKey{req.UserID, req.ItemID, req.IdempotencyKey}] = settledOrder{id: o.ID, until: until, order: o}
}

func (s *settledKeys) lookup(req PurchaseRequest, now time.Time) (settledOrder, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.m[settledKey{req.UserID, req.ItemID, req.IdempotencyKey}]
	if ok && !now.Before(o.until) {
		delete(s.m, settledKey{req.UserID, req.ItemID, req.IdempotencyKey})
		return settledOrder{}, false
	}
	return o, ok
}

// refresh records the order as read at now.
func (s *settledKeys) refresh(req PurchaseRequest, o orders.Order, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := settledKey{req.UserID, req.ItemID, req.IdempotencyKey}
	if so, ok := s.m[k]; ok {
		so.order, so.fresh = o, now.Add(ReplayFresh)
		s.m[k] = so
	}
}

// settledReplay answers a replay of a settled key with its order as Redis holds it now (one
// HGET); ok is false when the key is not known settled here or the order is gone.
func (s *Store) settledReplay(ctx context.Context, req PurchaseRequest) (PurchaseResult, bool) {
	if req.IdempotencyKey == "" {
		return PurchaseResult{}, false
	}
	now := time.Now()
	so, ok := s.settled.lookup(req, now)
	if !ok {
		return PurchaseResult{}, false
	}
	if now.Before(so.fresh) {
		return PurchaseResult{Order: so.order, Replayed: true}, true
	}
	packed, err := s.rdb.HGet(ctx, s.keys.Item(req.ItemID).Orders(), so.id).Result()
	if err != nil {
		return PurchaseResult{}, false
	}
	o, err := orders.Unpack(so.id, req.ItemID, packed)
	if err != nil {
		return PurchaseResult{}, false
	}
	s.settled.refresh(req, o, now)
	return PurchaseResult{Order: o, Replayed: true}, true
}

// refusedFromMemory is the purchase limit's remembered refusal of req's shopper for its item.
func (s *Store) refusedFromMemory(req PurchaseRequest) (*PurchaseError, bool) {
	d, ok := s.refusals.Refused(req.UserID+"\x00"+req.ItemID, time.Now())
	if !ok {
		return nil, false
	}
	return &PurchaseError{Err: limits.ErrRateLimited, StockLeft: -1, Limit: &d}, true
}

// settle remembers what a purchase answered: a settled key's order, or a refusal by the limit.
func (s *Store) settle(req PurchaseRequest, res PurchaseResult, err error) {
	if err == nil {
		s.settled.remember(req, res.Order, s.opt.IdempotencyTTL)
		return
	}
	if pe, ok := err.(*PurchaseError); ok && pe.Limit != nil && !pe.Limit.Allowed {
		s.refusals.Remember(req.UserID+"\x00"+req.ItemID, *pe.Limit, time.Now())
	}
}

// RefusalsFromMemory is the purchases answered 429 from memory so far.
func (s *Store) RefusalsFromMemory() int64 { return s.refusals.Served() }

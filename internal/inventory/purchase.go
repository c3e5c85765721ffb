package inventory

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/batch"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/orders"
)

// PurchaseRequest is one shopper's attempt to buy.
type PurchaseRequest struct {
	ItemID         string
	UserID         string
	Quantity       int64
	IdempotencyKey string // optional, 1-64 printable ASCII
	// QueuePass is the id of the shopper's waiting-room pass, already verified by the caller
	// (queue.Signer); "" for none. The script checks it is unspent and spends it.
	QueuePass string
}

// PurchaseResult is the outcome of a successful (or replayed) purchase.
type PurchaseResult struct {
	Order    orders.Order
	Replayed bool             // an earlier order for the same idempotency key
	Limit    *limits.Decision // the purchase rate limit's verdict (nil when off)
}

// PurchaseError is a refused purchase: Err is a sentinel (ErrSoldOut, limits.ErrRateLimited, ...)
// and Limit the rate limit's verdict when it ran.
type PurchaseError struct {
	Err       error
	StockLeft int64 // after the script call (batch) that refused it
	Limit     *limits.Decision
}

func (e *PurchaseError) Error() string { return e.Err.Error() }

func (e *PurchaseError) Unwrap() error { return e.Err }

// errKnownSoldOut is the answer of the in-memory sold-out short cut: one shared value (it
// carries no per-call figures), so the answer a sale gives most often allocates nothing.
// Callers read PurchaseErrors, never modify them.
var errKnownSoldOut = &PurchaseError{Err: ErrSoldOut}

// ValidIdempotencyKey reports whether k is 1-64 printable ASCII characters.
func ValidIdempotencyKey(k string) bool {
	if len(k) < 1 || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// Purchase reserves stock for one shopper. Concurrent purchases of the same item are
// coalesced into one script call (one Redis round trip for the whole batch); each attempt
// is still decided on its own inside the script. An item known to be sold out is refused
// from memory without a Redis call until the snapshot or a write sees stock again.
func (s *Store) Purchase(ctx context.Context, req PurchaseRequest) (PurchaseResult, error) {
	if !keyspace.ValidID(req.ItemID) {
		return PurchaseResult{}, ErrNotFound
	}
	if !keyspace.ValidID(req.UserID) {
		return PurchaseResult{}, fmt.Errorf("%w: bad user id", ErrInvalid)
	}
	if req.Quantity < 1 || req.Quantity > 1e9 {
		return PurchaseResult{}, fmt.Errorf("%w: quantity must be 1..1000000000", ErrInvalid)
	}
	if req.IdempotencyKey != "" && !ValidIdempotencyKey(req.IdempotencyKey) {
		return PurchaseResult{}, fmt.Errorf("%w: Idempotency-Key must be 1-64 printable ASCII characters", ErrInvalid)
	}
	if !s.Known(ctx, req.ItemID) {
		return PurchaseResult{}, ErrNotFound
	}
	if s.opt.Admit != nil {
		if refusal := s.opt.Admit(); refusal != nil {
			err := error(notAdmitted{refusal})
			if req.IdempotencyKey != "" {
				return s.replayOr(ctx, req, err)
			}
			return PurchaseResult{}, err
		}
	}
	if res, ok := s.settledReplay(ctx, req); ok {
		return res, nil
	}
	if refusal, ok := s.refusedFromMemory(req); ok {
		if req.IdempotencyKey != "" { // a replay made elsewhere still gets its order
			return s.replayOr(ctx, req, refusal)
		}
		return PurchaseResult{}, refusal
	}
	// A retry with an idempotency key must get its order back, so it always asks Redis.
	if req.IdempotencyKey == "" && s.KnownSoldOut(req.ItemID) {
		return PurchaseResult{}, errKnownSoldOut
	}
	call := &purchaseCall{ctx: ctx, req: req, done: make(chan purchaseReply, 1)}
	s.batcher.Submit(call.req.ItemID, call)
	select {
	case r := <-call.done:
		s.settle(req, r.res, r.err)
		return r.res, r.err
	case <-ctx.Done():
		// A batch not yet sent drops this call; one already sent may still make the order, so
		// the outcome is unknown to this caller. A retry with the same Idempotency-Key returns
		// the order if it was made.
		return PurchaseResult{}, fmt.Errorf("inventory: purchase %s: %w (%w)", req.ItemID, exactlyonce.ErrOutcomeUnknown, ctx.Err())
	}
}

// replayOr answers a purchase that Admit refused (refusal) from its idempotency record, if it
// has one: a replay of a known key gets its order back whatever the outbox holds, and only
// reads. A key without a record gets the refusal; so does any read error (nothing changed).
func (s *Store) replayOr(ctx context.Context, req PurchaseRequest, refusal error) (PurchaseResult, error) {
	k := s.keys.Item(req.ItemID)
	oid, err := s.rdb.Get(ctx, k.Idempotency(req.UserID, req.IdempotencyKey)).Result()
	if err != nil {
		return PurchaseResult{}, refusal
	}
	packed, err := s.rdb.HGet(ctx, k.Orders(), oid).Result()
	if err != nil {
		return PurchaseResult{}, refusal
	}
	o, err := orders.Unpack(oid, req.ItemID, packed)
	if err != nil {
		return PurchaseResult{}, refusal
	}
	return PurchaseResult{Order: o, Replayed: true}, nil
}

type purchaseCall struct {
	ctx  context.Context // the caller's: a call whose caller has gone is never sent
	req  PurchaseRequest
	done chan purchaseReply
}

type purchaseReply struct {
	res PurchaseResult
	err error
}

func (c *purchaseCall) Context() context.Context { return c.ctx }
func (c *purchaseCall) Fail(err error)           { c.done <- purchaseReply{err: err} }

// runBatch runs purchase.lua once for calls that all buy the same item. Calls whose caller has
// gone are dropped first: nobody would learn their outcome. The script call re-sends itself
// until it has the reply or exactlyonce.CallDeadline passes (one run whatever the transport does).
func (s *Store) runBatch(item string, calls []*purchaseCall) {
	calls = batch.Live(calls)
	if len(calls) == 0 {
		return
	}
	k := s.keys.Item(item)
	keys := make([]string, 0, 10+len(calls))
	hash := k.Hash()
	keys = append(keys, hash, k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(),
		k.PurchaseLimits(), k.QueueTickets(), k.UserOrders())
	lim := s.opt.PurchaseLimit
	args := make([]any, 0, 6+4*len(calls))
	args = append(args, s.opt.ReservationTTL.Milliseconds(), s.opt.IdempotencyTTL.Milliseconds(),
		lim.Rate, lim.Period.Milliseconds(), lim.Burst, item)
	for _, c := range calls {
		idem := hash // an attempt without an Idempotency-Key names no key of its own (purchase.lua)
		if c.req.IdempotencyKey != "" {
			idem = k.Idempotency(c.req.UserID, c.req.IdempotencyKey)
		}
		keys = append(keys, idem)
		args = append(args, c.req.UserID, c.req.Quantity, c.req.IdempotencyKey, c.req.QueuePass)
	}
	users := make([]string, len(calls))
	for i, c := range calls {
		users[i] = c.req.UserID
	}
	// The users' order indexes (orders.Index) are in other slots, so the script cannot write
	// them: they ride in its pipeline, blind, so a purchase stays one round trip and the
	// shopper's next "my orders" lists the order. A failed index write leaves the entry to the
	// outbox relay and the order stands; a reader removes the field a refused attempt left.
	mark := func(ctx context.Context, pipe redis.Pipeliner) { s.index.Mark(ctx, pipe, item, users) }
	sent := time.Now() // when Redis was asked: the age of a sold-out answer (soldout.go)
	res, err := purchaseScript.RunWith(context.Background(), s.rdb, keys, mark, args...).Slice()
	var b batchReply
	if err == nil {
		b, err = parseBatchReply(res, len(calls))
	}
	if err != nil {
		err = fmt.Errorf("inventory: purchase %s: %w", item, err)
		for _, c := range calls {
			c.done <- purchaseReply{err: err}
		}
		return
	}
	replies := make([]purchaseReply, len(calls))
	for i, c := range calls {
		replies[i] = s.purchaseReply(item, c.req, res[replyWidth*i:replyWidth*(i+1)], b, sent)
	}
	for i, c := range calls {
		c.done <- replies[i]
	}
}

// batchReply is what purchase.lua's reply says once for the whole batch (its last string):
// the stock left after it, and the price, creation and expiry every order it made shares.
type batchReply struct {
	left, price      int64
	created, expires time.Time
}

// replyWidth is how many values of purchase.lua's reply are one attempt's: letter, value and
// the rate limiter's two figures.
const replyWidth = 4

// parseBatchReply checks a reply holds calls attempts and the batch's string, and reads the
// latter: "stock_left|price_cents|created_ms|expires_ms".
func parseBatchReply(res []any, calls int) (batchReply, error) {
	if len(res) != replyWidth*calls+1 {
		return batchReply{}, errNoReply
	}
	s, ok := res[replyWidth*calls].(string)
	if !ok {
		return batchReply{}, errNoReply
	}
	var n [4]int64
	for i := range n {
		var f string
		if i < 3 {
			if f, s, ok = strings.Cut(s, "|"); !ok {
				return batchReply{}, errNoReply
			}
		} else {
			f = s
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return batchReply{}, errNoReply
		}
		n[i] = v
	}
	return batchReply{left: n[0], price: n[1], created: time.UnixMilli(n[2]).UTC(), expires: time.UnixMilli(n[3]).UTC()}, nil
}

// outcomes are the sentinels of purchase.lua's refusal letters.
var outcomes = [...]struct {
	letter byte
	err    error
}{
	{'N', ErrNotFound}, {'I', ErrInvalid}, {'S', ErrSaleNotStarted}, {'E', ErrSaleEnded},
	{'Q', ErrQueueRequired}, {'L', limits.ErrRateLimited}, {'X', ErrLimitExceeded}, {'O', ErrSoldOut},
}

// purchaseReply decodes one attempt's reply (purchase.lua): letter, value, and the rate
// limiter's two figures (-1 when it did not run). "C" created order number value; "R" replayed
// order value, packed in the third; a refusal's letter with value 0. A created order is the
// request's user and quantity with the batch's price and times.
func (s *Store) purchaseReply(item string, req PurchaseRequest, v []any, b batchReply, sent time.Time) purchaseReply {
	letter, ok := v[0].(string)
	if !ok || len(letter) != 1 {
		return purchaseReply{err: errNoReply}
	}
	if letter == "R" { // the limiter was not reached
		oid, ok1 := v[1].(string)
		packed, ok2 := v[2].(string)
		if !ok1 || !ok2 {
			return purchaseReply{err: errNoReply}
		}
		o, err := orders.Unpack(oid, item, packed)
		if err != nil {
			return purchaseReply{err: err}
		}
		return purchaseReply{res: PurchaseResult{Order: o, Replayed: true}}
	}
	value, ok1 := v[1].(int64)
	limA, ok2 := v[2].(int64) // remaining, or for L the retry time (ms)
	limB, ok3 := v[3].(int64) // the reset time (ms)
	if !ok1 || !ok2 || !ok3 {
		return purchaseReply{err: errNoReply}
	}
	var dec *limits.Decision
	if limA >= 0 { // the limiter ran
		d := limits.NewDecision(s.opt.PurchaseLimit.Burst, true, int(limA), 0, float64(limB))
		if letter == "L" {
			d = limits.NewDecision(s.opt.PurchaseLimit.Burst, false, 0, float64(limA), float64(limB))
		}
		dec = &d
	}
	if letter == "C" {
		if value < 1 {
			return purchaseReply{err: errNoReply}
		}
		if b.left == 0 {
			s.markSoldOut(item, sent, s.saleEnd(item))
		}
		return purchaseReply{res: PurchaseResult{Order: orders.Order{
			ID: item + "." + strconv.FormatInt(value, 10), ItemID: item, UserID: req.UserID, Quantity: req.Quantity,
			PriceCents: b.price, Status: orders.Reserved, CreatedAt: b.created, ExpiresAt: b.expires,
		}, Limit: dec}}
	}
	var sentinel error
	for _, o := range outcomes {
		if o.letter == letter[0] {
			sentinel = o.err
		}
	}
	if sentinel == nil || value != 0 {
		return purchaseReply{err: fmt.Errorf("inventory: unknown purchase outcome %q", v)}
	}
	// These outcomes come after the sale-window checks, so no stock left means sold out now.
	if b.left == 0 && (sentinel == ErrSoldOut || sentinel == ErrLimitExceeded || sentinel == limits.ErrRateLimited) {
		s.markSoldOut(item, sent, s.saleEnd(item))
	}
	return purchaseReply{err: &PurchaseError{Err: sentinel, StockLeft: b.left, Limit: dec}}
}

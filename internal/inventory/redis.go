package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/flashsale/flashsale/internal/batch"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/orders"
)

// Options tune a Store. Every field is used as given: config states the defaults and fills
// them (tests take them from config.Defaults).
type Options struct {
	ReservationTTL   time.Duration
	IdempotencyTTL   time.Duration
	SnapshotInterval time.Duration // catalogue snapshot refresh
	PurchaseBatch    int           // most purchases coalesced into one script call
	PurchaseInFlight int           // most script calls of one item at once
	// PurchaseLinger is how long a hot item's next script call may wait for half a batch
	// (batch.Batcher); 0: it never waits.
	PurchaseLinger time.Duration
	PurchaseLimit  limits.Policy // per-user-per-item purchase rate limit, folded into the script
	// Admit, when set, may refuse a purchase before it reaches Redis with an error that says
	// nothing was changed (the outbox over its bound: outbox.Relay.Admit); Purchase returns it
	// wrapped with ErrNotAdmitted.
	Admit func() error
}

// Store is the inventory over Redis: items, stock and purchases.
type Store struct {
	rdb  redis.UniversalClient
	keys keyspace.Space
	opt  Options

	batcher *batch.Batcher[purchaseCall]

	snapMu   sync.RWMutex
	snap     map[string]Item
	snapAt   time.Time
	snapGen  uint64 // changes with every new snapshot map (Catalogue callers cache by it)
	snapLoad singleflight.Group
	// clocks holds, per shard, the highest change-log clock the snapshot has read (only the
	// loader, under snapLoad, touches it); nil until the first full load.
	clocks []int64
	// histories holds, per shard, the replication id of the primary the snapshot was read
	// from (only the loader touches it).
	histories []string
	// sweep is the slow full pass behind the change logs (only the loader touches it).
	sweep   sweepState
	soldOut sync.Map // item id -> time.Time: answer sold_out from memory until then (soldout.go)

	orderMu sync.Mutex
	order   *snapOrder // the ids of the latest generation asked for, in order

	looping atomic.Int32 // RunSnapshot loops running

	unknown unknownIDs // ids Redis lacked a moment ago (Known)

	index *orders.Index // the users' order indexes, written after each batch (runBatch)

	refusals *limits.Refusals // shoppers over the purchase limit, per item (settled.go)
	settled  settledKeys      // replays answered from one read (settled.go)
}

// NewStore returns a Store over rdb with the given key space.
func NewStore(rdb redis.UniversalClient, keys keyspace.Space, opt Options) *Store {
	s := &Store{rdb: rdb, keys: keys, opt: opt, index: orders.NewIndex(rdb, keys), refusals: limits.NewRefusals(refusalsKept)}
	s.batcher = batch.New(opt.PurchaseBatch, opt.PurchaseInFlight, opt.PurchaseLinger, s.runBatch)
	return s
}

// Upsert creates or updates an item. created reports which.
func (s *Store) Upsert(ctx context.Context, in Input) (Item, bool, error) {
	res, err := s.UpsertMany(ctx, []Input{in})
	if err != nil {
		return Item{}, false, err
	}
	return res[0].Item, res[0].Created, res[0].Err
}

// UpsertResult is what UpsertMany did with one Input.
type UpsertResult struct {
	Item    Item // as saved; with ErrInvalidState, as it is
	Created bool
	Err     error // ErrInvalid, ErrInvalidState or ErrRestoring (wrapped): this input was not saved
}

// upsertsPerPipeline is how many upserts UpsertMany sends in one pipeline: one round trip for
// them all, while a pipeline's hold on Redis stays short.
const upsertsPerPipeline = 128

// UpsertMany is Upsert of every input in turn (an import), one result per input, in pipelines
// of upsertsPerPipeline and one snapshot copy for all. A pipeline never holds two inputs of one
// item, so rows apply in order. A non-nil error is Redis failing: the inputs before the failed
// pipeline are saved, those in it may be, none after it is sent.
func (s *Store) UpsertMany(ctx context.Context, ins []Input) ([]UpsertResult, error) {
	res := make([]UpsertResult, len(ins))
	var batch []int              // the next pipeline's inputs (indexes into ins)
	inBatch := map[string]bool{} // and their items
	var saved []Item
	defer func() { s.update(saved...) }() // also what was saved before a failure
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		items, err := s.upsertBatch(ctx, ins, batch, res)
		saved = append(saved, items...)
		batch = batch[:0]
		clear(inBatch)
		return err
	}
	for i, in := range ins {
		if err := in.Validate(); err != nil {
			res[i].Err = err
			continue
		}
		if inBatch[in.ID] || len(batch) == upsertsPerPipeline {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		batch = append(batch, i)
		inBatch[in.ID] = true
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return res, nil
}

// upsertBatch runs upsert_item.lua for ins[i] of every i in batch (valid inputs of distinct
// items) in one pipeline, fills their results and returns the items the replies carry.
func (s *Store) upsertBatch(ctx context.Context, ins []Input, batch []int, res []UpsertResult) ([]Item, error) {
	ids := make([]any, len(batch))
	calls := make([]exactlyonce.Call, len(batch))
	for j, i := range batch {
		ids[j] = ins[i].ID
		calls[j] = s.upsertCall(ins[i])
	}
	// The catalogue set is another slot: add first, so a crash leaves at worst ids that
	// readers skip (no item hash), never an item missing from the catalogue.
	if err := s.rdb.SAdd(ctx, s.keys.Catalog(), ids...).Err(); err != nil {
		return nil, fmt.Errorf("inventory: upsert %s: %w", ins[batch[0]].ID, err)
	}
	var items []Item
	var failed error
	for j, cmd := range upsertItemScript.RunEach(ctx, s.rdb, calls) {
		id := ins[batch[j]].ID
		reply, err := cmd.Slice()
		if err == nil && len(reply) > 0 && reply[0] == "restoring" {
			res[batch[j]].Err = fmt.Errorf("%w: %s", ErrRestoring, id)
			continue
		}
		if err == nil && len(reply) > 0 && reply[0] == "ends_past" {
			res[batch[j]].Err = fmt.Errorf("%w: ends_at is in the past; give a time from now on (an unchanged past ends_at may stay)", ErrInvalid)
			continue
		}
		var it Item
		if err == nil {
			it, err = upsertedItem(id, reply)
		}
		if err != nil {
			// The first failure is the answer; the items of the others are still kept.
			if failed == nil {
				failed = fmt.Errorf("inventory: upsert %s: %w", id, err)
			}
			continue
		}
		items = append(items, it)
		it.Status = it.StatusAt(time.Now())
		r := &res[batch[j]]
		r.Item = it
		switch reply[0] {
		case "invalid_state":
			r.Err = fmt.Errorf("%w: stock differs from the current total %d; use the stock route", ErrInvalidState, it.StockTotal)
			if it.ArchivedAt != nil {
				r.Err = fmt.Errorf("%w: item %s is archived (off sale for good) and cannot be changed", ErrInvalidState, id)
			}
		case "created":
			r.Created = true
		}
	}
	return items, failed
}

// upsertedItem reads the item from upsert_item.lua's reply {outcome, HGETALL of the item}.
func upsertedItem(id string, reply []any) (Item, error) {
	if len(reply) != 2 {
		return Item{}, errNoReply
	}
	it, err := itemFromHash(id, pairs(reply[1]))
	if err != nil {
		return Item{}, errNoReply
	}
	return it, nil
}

// upsertCall is upsert_item.lua's call for in.
func (s *Store) upsertCall(in Input) exactlyonce.Call {
	k := s.keys.Item(in.ID)
	stock := ""
	if in.Stock != nil {
		stock = strconv.FormatInt(*in.Stock, 10)
	}
	// The waiting room: three numbers, all 0 for none, all '' to keep the current one.
	qRate, qMax, qTTL := any(0), any(0), any(0)
	if in.KeepQueue {
		qRate, qMax, qTTL = "", "", ""
	} else if q := in.Queue; q != nil {
		qRate, qMax, qTTL = q.AdmitPerSecond, q.MaxActive, q.PassTTLSeconds
	}
	keepImage := "0"
	if in.KeepImage {
		keepImage = "1"
	}
	return exactlyonce.Call{
		Keys: []string{k.Hash(), k.Outbox(), k.Changed(), k.Clock(), k.Restoring()},
		Args: []any{in.ID, in.Name, in.Category, in.PriceCents, stock, in.PerUserLimit,
			msOrZero(in.StartsAt), msOrZero(in.EndsAt), qRate, qMax, qTTL, in.ImageURL, keepImage},
	}
}

// MaxStockTotal is the most stock an item can hold in all (2^53 - 1): the scripts count in Lua
// numbers (doubles), which hold every integer up to it exactly.
const MaxStockTotal = 1<<53 - 1

// AdjustStock adds (or, negative, withdraws) unsold stock. A withdrawal below zero unsold, or an
// addition taking stock_total over MaxStockTotal, is ErrInvalidState and changes nothing.
func (s *Store) AdjustStock(ctx context.Context, id string, delta int64) (Item, error) {
	return s.AdjustStockOnce(ctx, id, delta, "")
}

// AdjustStockOnce is AdjustStock with an idempotency key (1-64 printable ASCII; "" for none):
// the first change made with the key is the only one, and a retry with it gets the item that
// change answered (IdempotencyTTL long), so a change whose outcome was unknown can be retried.
func (s *Store) AdjustStockOnce(ctx context.Context, id string, delta int64, key string) (Item, error) {
	if !keyspace.ValidID(id) {
		return Item{}, ErrNotFound
	}
	if delta == 0 || delta > 1e12 || delta < -1e12 {
		return Item{}, fmt.Errorf("%w: delta must be a non-zero integer within ±1000000000000", ErrInvalid)
	}
	if key != "" && !ValidIdempotencyKey(key) {
		return Item{}, fmt.Errorf("%w: Idempotency-Key must be 1-64 printable ASCII characters", ErrInvalid)
	}
	k := s.keys.Item(id)
	idem := k.Hash() // a change without a key names no key of its own (adjust_stock.lua)
	if key != "" {
		idem = k.StockIdempotency(key)
	}
	res, err := adjustStockScript.Run(ctx, s.rdb, []string{k.Hash(), k.Outbox(), k.Changed(), k.Clock(), idem},
		id, delta, key, s.opt.IdempotencyTTL.Milliseconds()).Slice()
	if err != nil {
		return Item{}, fmt.Errorf("inventory: adjust %s: %w", id, err)
	}
	if res[0] == "not_found" {
		return Item{}, ErrNotFound
	}
	if res[0] == "replayed" {
		// The item as the first change left it: the snapshot may hold a newer one.
		it, err := itemFromHash(id, pairs(res[1]))
		if err != nil {
			return Item{}, err
		}
		it.Status = it.StatusAt(time.Now())
		return it, nil
	}
	it, err := s.remember(id, res[1])
	if err != nil {
		return Item{}, err
	}
	switch {
	case res[0] == "invalid_state" && it.ArchivedAt != nil:
		return it, fmt.Errorf("%w: item %s is archived (off sale for good); its stock cannot change", ErrInvalidState, id)
	case res[0] == "invalid_state":
		return it, fmt.Errorf("%w: only %d unsold units can be withdrawn", ErrInvalidState, it.StockLeft)
	case res[0] == "too_large":
		return it, fmt.Errorf("%w: stock_total %d plus %d is over the most an item holds, %d", ErrInvalidState, it.StockTotal, delta, MaxStockTotal)
	}
	return it, nil
}

// Archive takes an item off sale for good: once it returns, no purchase of the item succeeds
// (sale_ended), and the item leaves the shoppers' catalogue; its orders, open reservations
// and record stay. Archiving an archived item changes nothing and returns it.
func (s *Store) Archive(ctx context.Context, id string) (Item, error) {
	if !keyspace.ValidID(id) {
		return Item{}, ErrNotFound
	}
	k := s.keys.Item(id)
	res, err := archiveItemScript.Run(ctx, s.rdb, []string{k.Hash(), k.Outbox(), k.Changed(), k.Clock()}, id).Slice()
	if err != nil {
		return Item{}, fmt.Errorf("archive %s: %w", id, err)
	}
	if len(res) != 2 {
		return Item{}, errNoReply
	}
	if res[0] == "not_found" {
		return Item{}, ErrNotFound
	}
	it, err := s.remember(id, res[1])
	if err != nil {
		return Item{}, err
	}
	it.Status = StatusArchived
	return it, nil
}

// Get reads one item from Redis (not the snapshot).
func (s *Store) Get(ctx context.Context, id string) (Item, error) {
	if !keyspace.ValidID(id) {
		return Item{}, ErrNotFound
	}
	h, err := s.rdb.HGetAll(ctx, s.keys.Item(id).Hash()).Result()
	if err != nil {
		return Item{}, fmt.Errorf("inventory: get %s: %w", id, err)
	}
	it, err := itemFromHash(id, h)
	if err != nil {
		return Item{}, err
	}
	it.Status = it.StatusAt(time.Now())
	return it, nil
}

func msOrZero(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.UnixMilli()
}

var errNoReply = errors.New("inventory: script reply malformed")

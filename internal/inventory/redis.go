package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/limits"
)

// Options tune a Store; zero values take the defaults.
type Options struct {
	ReservationTTL   time.Duration // default 10m
	IdempotencyTTL   time.Duration // default 24h
	SnapshotInterval time.Duration // catalogue snapshot refresh, default 500ms
	PurchaseBatch    int           // most purchases coalesced into one script call, default 64
	PurchaseInFlight int           // most script calls of one item at once, default 2
	PurchaseLimit    limits.Policy // per-user-per-item purchase rate limit, folded into the script
	// Admit, when set, may refuse a purchase before it reaches Redis with an error that says
	// nothing was changed (the outbox over its bound: outbox.Relay.Admit).
	Admit func() error
}

// Store is the inventory over Redis: items, stock and purchases.
type Store struct {
	rdb  redis.UniversalClient
	keys keyspace.Space
	opt  Options

	batcher *batcher

	snapMu   sync.RWMutex
	snap     map[string]Item
	snapAt   time.Time
	snapGen  uint64 // changes with every new snapshot map (Catalogue callers cache by it)
	snapLoad singleflight.Group
	// clocks holds, per shard, the highest change-log clock the snapshot has read (only the
	// loader, under snapLoad, touches it); nil until the first full load.
	clocks  []int64
	soldOut sync.Map // item id -> time.Time: answer sold_out from memory until then (soldout.go)
}

// NewStore returns a Store over rdb with the given key space.
func NewStore(rdb redis.UniversalClient, keys keyspace.Space, opt Options) *Store {
	if opt.ReservationTTL <= 0 {
		opt.ReservationTTL = 10 * time.Minute
	}
	if opt.IdempotencyTTL <= 0 {
		opt.IdempotencyTTL = 24 * time.Hour
	}
	if opt.SnapshotInterval <= 0 {
		opt.SnapshotInterval = 500 * time.Millisecond
	}
	if opt.PurchaseBatch <= 0 {
		opt.PurchaseBatch = 64
	}
	if opt.PurchaseInFlight <= 0 {
		opt.PurchaseInFlight = 2
	}
	s := &Store{rdb: rdb, keys: keys, opt: opt}
	s.batcher = newBatcher(opt.PurchaseBatch, opt.PurchaseInFlight, s.runBatch)
	return s
}

// Upsert creates or updates an item. created reports which.
func (s *Store) Upsert(ctx context.Context, in Input) (Item, bool, error) {
	if err := in.Validate(); err != nil {
		return Item{}, false, err
	}
	// The catalogue set is another slot: add first, so a crash leaves at worst an id that
	// readers skip (no item hash), never an item missing from the catalogue.
	if err := s.rdb.SAdd(ctx, s.keys.Catalog(), in.ID).Err(); err != nil {
		return Item{}, false, fmt.Errorf("inventory: upsert %s: %w", in.ID, err)
	}
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
	res, err := upsertItemScript.Run(ctx, s.rdb, []string{k.Hash(), k.Outbox(), k.Changed(), k.Clock()},
		in.ID, in.Name, in.Category, in.PriceCents, stock, in.PerUserLimit,
		msOrZero(in.StartsAt), msOrZero(in.EndsAt), qRate, qMax, qTTL).Slice()
	if err != nil {
		return Item{}, false, fmt.Errorf("inventory: upsert %s: %w", in.ID, err)
	}
	it, err := s.remember(in.ID, res[1])
	if err != nil {
		return Item{}, false, err
	}
	switch res[0] {
	case "invalid_state":
		return it, false, fmt.Errorf("%w: stock differs from the current total %d; use the stock route", ErrInvalidState, it.StockTotal)
	case "created":
		return it, true, nil
	}
	return it, false, nil
}

// AdjustStock adds (or, negative, withdraws) unsold stock.
func (s *Store) AdjustStock(ctx context.Context, id string, delta int64) (Item, error) {
	if !keyspace.ValidID(id) {
		return Item{}, ErrNotFound
	}
	if delta == 0 || delta > 1e12 || delta < -1e12 {
		return Item{}, fmt.Errorf("%w: delta must be a non-zero integer within ±1000000000000", ErrInvalid)
	}
	k := s.keys.Item(id)
	res, err := adjustStockScript.Run(ctx, s.rdb, []string{k.Hash(), k.Outbox(), k.Changed(), k.Clock()}, id, delta).Slice()
	if err != nil {
		return Item{}, fmt.Errorf("inventory: adjust %s: %w", id, err)
	}
	if res[0] == "not_found" {
		return Item{}, ErrNotFound
	}
	it, err := s.remember(id, res[1])
	if err != nil {
		return Item{}, err
	}
	if res[0] == "invalid_state" {
		return it, fmt.Errorf("%w: only %d unsold units can be withdrawn", ErrInvalidState, it.StockLeft)
	}
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

// IDs returns every item id in the catalogue (sorted), from the snapshot.
func (s *Store) IDs(ctx context.Context) ([]string, error) {
	items, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return ids, nil
}

// List returns every item, sorted by id, from the in-process snapshot (at most one
// snapshot interval old; pushed fresher by this instance's own writes).
func (s *Store) List(ctx context.Context) ([]Item, error) {
	snap, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]Item, 0, len(snap))
	for _, it := range snap {
		it.Status = it.StatusAt(now)
		out = append(out, it)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}

// Queued reports whether the catalogue snapshot shows the item with a waiting room (false when
// the item or the snapshot is missing): Lookup's answer to that one question, asked by every
// purchase, without copying the item or reading the clock for its status.
func (s *Store) Queued(ctx context.Context, id string) bool {
	snap, err := s.snapshot(ctx)
	return err == nil && snap[id].Queue != nil
}

// Lookup returns one item from the snapshot.
func (s *Store) Lookup(ctx context.Context, id string) (Item, error) {
	snap, err := s.snapshot(ctx)
	if err != nil {
		return Item{}, err
	}
	it, ok := snap[id]
	if !ok {
		return Item{}, ErrNotFound
	}
	it.Status = it.StatusAt(time.Now())
	return it, nil
}

// RunSnapshot refreshes the catalogue snapshot every interval until ctx ends, so reads
// and the sold-out short cut never wait for Redis.
func (s *Store) RunSnapshot(ctx context.Context) {
	t := time.NewTicker(s.opt.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.refresh(ctx)
		}
	}
}

func (s *Store) snapshot(ctx context.Context) (map[string]Item, error) {
	snap, _, err := s.Catalogue(ctx)
	return snap, err
}

// Catalogue returns the snapshot itself (callers must not modify it) and its generation,
// which changes whenever the snapshot does, so readers can cache what they derive from it
// (the HTTP layer keeps the encoded JSON). Item.Status is not set: it depends on the time.
func (s *Store) Catalogue(ctx context.Context) (map[string]Item, uint64, error) {
	s.snapMu.RLock()
	snap, at, gen := s.snap, s.snapAt, s.snapGen
	s.snapMu.RUnlock()
	if snap != nil && time.Since(at) < s.opt.SnapshotInterval {
		return snap, gen, nil
	}
	if err := s.refresh(ctx); err != nil {
		if snap != nil && time.Since(at) < 2*time.Second {
			return snap, gen, nil // serve slightly stale data through a blip
		}
		return nil, 0, err
	}
	s.snapMu.RLock()
	defer s.snapMu.RUnlock()
	return s.snap, s.snapGen, nil
}

// refresh brings the snapshot up to date, by one loader at a time. The first call loads the
// whole catalogue; later calls read only what changed: one ZRANGE of each shard's change log
// (lua/changed.lua) past the clock last seen, then one HGETALL per changed item. So an idle
// catalogue costs one command per shard per refresh, whatever its size.
func (s *Store) refresh(ctx context.Context) error {
	_, err, _ := s.snapLoad.Do("snap", func() (any, error) {
		seen := time.Now() // before the reads: the age of what they tell the sold-out short cut
		if s.clocks == nil {
			return nil, s.loadAll(ctx, seen)
		}
		return nil, s.loadChanged(ctx, seen)
	})
	return err
}

// loadAll reads every shard's clock, then every item (SMEMBERS of the catalogue, one
// pipelined HGETALL per item). Clocks first: a change made during the item reads is read
// again by the next loadChanged, never missed.
func (s *Store) loadAll(ctx context.Context, seen time.Time) error {
	pipe := s.rdb.Pipeline()
	heads := make([]*redis.ZSliceCmd, keyspace.Shards)
	for n := range keyspace.Shards {
		heads[n] = pipe.ZRangeWithScores(ctx, s.keys.Shard(n).Changed(), -1, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("inventory: change logs: %w", err)
	}
	clocks := make([]int64, keyspace.Shards)
	for n, cmd := range heads {
		if z := cmd.Val(); len(z) == 1 {
			clocks[n] = int64(z[0].Score)
		}
	}
	ids, err := s.rdb.SMembers(ctx, s.keys.Catalog()).Result()
	if err != nil {
		return fmt.Errorf("inventory: catalogue: %w", err)
	}
	read, err := s.readItems(ctx, ids)
	if err != nil {
		return err
	}
	snap := make(map[string]Item, len(ids))
	for id, it := range read {
		if it != nil {
			snap[id] = *it
			s.observeStock(*it, seen)
		}
	}
	s.install(snap, nil)
	s.clocks = clocks
	return nil
}

// loadChanged reads the items each shard's change log names past the clock last seen.
func (s *Store) loadChanged(ctx context.Context, seen time.Time) error {
	pipe := s.rdb.Pipeline()
	logs := make([]*redis.ZSliceCmd, keyspace.Shards)
	for n := range keyspace.Shards {
		logs[n] = pipe.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: s.keys.Shard(n).Changed(), Start: "(" + strconv.FormatInt(s.clocks[n], 10), Stop: "+inf", ByScore: true,
		})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("inventory: change logs: %w", err)
	}
	var ids []string
	clocks := slices.Clone(s.clocks)
	for n, cmd := range logs {
		for _, z := range cmd.Val() {
			id, _ := z.Member.(string)
			ids = append(ids, id)
			clocks[n] = max(clocks[n], int64(z.Score))
		}
	}
	read, err := s.readItems(ctx, ids)
	if err != nil {
		return err
	}
	for _, it := range read {
		if it != nil {
			s.observeStock(*it, seen)
		}
	}
	// Every sold-out item that did not change is, at seen, still sold out: renew its mark.
	s.soldOut.Range(func(k, _ any) bool {
		id := k.(string)
		if _, changed := read[id]; !changed {
			if it, ok := s.current(id); ok {
				s.observeStock(it, seen)
			}
		}
		return true
	})
	s.install(nil, read)
	s.clocks = clocks
	return nil
}

// readItems reads the given items' hashes in one pipeline; an id without an item hash (a
// restore is rebuilding it, or an upsert that did not finish) maps to nil.
func (s *Store) readItems(ctx context.Context, ids []string) (map[string]*Item, error) {
	out := make(map[string]*Item, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, s.keys.Item(id).Hash())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("inventory: catalogue items: %w", err)
	}
	for i, id := range ids {
		if it, err := itemFromHash(id, cmds[i].Val()); err == nil {
			out[id] = &it
		} else {
			out[id] = nil
		}
	}
	return out, nil
}

// current returns an item of the snapshot.
func (s *Store) current(id string) (Item, bool) {
	s.snapMu.RLock()
	defer s.snapMu.RUnlock()
	it, ok := s.snap[id]
	return it, ok
}

// install publishes a new snapshot: all (a full load) or the current one with changes applied
// (nil: the item is gone). A write that finished while the reads ran may have put a newer
// version of an item into the snapshot (update): it is never replaced with an older one. The
// generation moves only when something changed, so what readers derive from it stays cached.
func (s *Store) install(all map[string]Item, changes map[string]*Item) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	s.snapAt = time.Now()
	if all == nil && len(changes) == 0 {
		return
	}
	next := all
	if next == nil {
		next = make(map[string]Item, len(s.snap)+len(changes))
		for id, it := range s.snap {
			next[id] = it
		}
		for id, it := range changes {
			if it == nil {
				delete(next, id)
			} else {
				next[id] = *it
			}
		}
	}
	for id, cur := range s.snap {
		if it, ok := next[id]; ok && cur.Version > it.Version {
			next[id] = cur
		}
	}
	s.snap = next
	s.snapGen++
}

// remember parses a script's HGETALL reply and puts the item into the snapshot.
func (s *Store) remember(id string, reply any) (Item, error) {
	it, err := itemFromHash(id, pairs(reply))
	if err != nil {
		return Item{}, err
	}
	s.update(it)
	it.Status = it.StatusAt(time.Now())
	return it, nil
}

// update replaces an item in the snapshot (copy on write) when it is newer.
func (s *Store) update(it Item) {
	if it.StockLeft > 0 {
		s.soldOut.Delete(it.ID)
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.snap == nil {
		return
	}
	if old, ok := s.snap[it.ID]; ok && old.Version > it.Version {
		return
	}
	next := make(map[string]Item, len(s.snap)+1)
	for k, v := range s.snap {
		next[k] = v
	}
	next[it.ID] = it
	s.snap = next
	s.snapGen++
}

func msOrZero(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.UnixMilli()
}

var errNoReply = errors.New("inventory: script reply malformed")

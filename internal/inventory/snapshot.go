package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// maxStale is how old a snapshot reads serve: through a blip of Redis (the refresh failed),
// and, while RunSnapshot runs, without refreshing it themselves (or two intervals if longer).
const maxStale = 2 * time.Second

// Every catalogue call to Redis has a deadline whatever its caller's, so a refresh stuck on a
// cut-off primary answers purchases 503 at once instead of holding them: a refresh gets
// loadTimeout; a reader waits at most refreshWait for one, then serves what it has (up to
// maxStale) or fails.
const (
	loadTimeout = 5 * time.Second
	refreshWait = time.Second
)

// snapOrder is what List and Queued derive from one snapshot generation: found once per
// generation, not per call, so a tick over a 10,000-item catalogue sorts nothing.
type snapOrder struct {
	gen    uint64
	ids    []string // every item's, sorted
	queued []string // those with a waiting room, sorted
}

// orderOf returns the sorted ids of snap, which is the snapshot of generation gen.
func (s *Store) orderOf(snap map[string]Item, gen uint64) *snapOrder {
	s.orderMu.Lock()
	defer s.orderMu.Unlock()
	prev := s.order
	if prev != nil && prev.gen == gen {
		return prev
	}
	o := &snapOrder{gen: gen}
	if prev != nil && len(prev.ids) == len(snap) {
		o.ids = prev.ids // the same items (the usual change: stock moved) keep their order
		for _, id := range prev.ids {
			if _, ok := snap[id]; !ok {
				o.ids = nil
				break
			}
		}
	}
	if o.ids == nil {
		o.ids = make([]string, 0, len(snap))
		for id := range snap {
			o.ids = append(o.ids, id)
		}
		sort.Strings(o.ids)
	}
	for _, id := range o.ids {
		if snap[id].Queue != nil {
			o.queued = append(o.queued, id)
		}
	}
	s.order = o
	return o
}

// Known reports whether id may name an item: from the snapshot as it is (never refreshed), else
// from Redis, since another api may have just created it; an id Redis lacks is answered unknown
// from memory for UnknownFor. With no snapshot yet or a failed look-up it answers true: the
// script that follows has the last word.
func (s *Store) Known(ctx context.Context, id string) bool {
	s.snapMu.RLock()
	snap := s.snap
	_, ok := snap[id]
	s.snapMu.RUnlock()
	if ok || snap == nil {
		return true
	}
	if !keyspace.ValidID(id) || s.unknown.missing(id, time.Now()) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, refreshWait)
	defer cancel()
	h, err := s.rdb.HGetAll(ctx, s.keys.Item(id).Hash()).Result()
	if err != nil {
		return true
	}
	if len(h) == 0 {
		s.unknown.remember(id, time.Now())
		return false
	}
	if it, err := itemFromHash(id, h); err == nil {
		s.update(it) // known from now on: the next purchase of it costs no look-up
	}
	return true
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
	snap, gen, err := s.Catalogue(ctx)
	if err != nil {
		return nil, err
	}
	return itemsAt(snap, s.orderOf(snap, gen).ids, time.Now()), nil
}

// itemsAt returns the items of snap named by ids, in that order, with their status at now.
func itemsAt(snap map[string]Item, ids []string, now time.Time) []Item {
	out := make([]Item, 0, len(ids))
	for _, id := range ids {
		if it, ok := snap[id]; ok {
			it.Status = it.StatusAt(now)
			out = append(out, it)
		}
	}
	return out
}

// Queued returns the items that have a waiting room, sorted by id, from the snapshot. The
// waiting room's admission step asks on every tick: its cost follows the waiting rooms, not
// the catalogue (their ids are found once per snapshot generation, see snapOrder).
func (s *Store) Queued(ctx context.Context) ([]Item, error) {
	snap, gen, err := s.Catalogue(ctx)
	if err != nil {
		return nil, err
	}
	return itemsAt(snap, s.orderOf(snap, gen).queued, time.Now()), nil
}

// HasQueue reports whether the catalogue snapshot shows the item with a waiting room (false
// when the item or the snapshot is missing): Lookup's answer to that one question, asked by
// every purchase, without copying the item or reading the clock for its status.
func (s *Store) HasQueue(ctx context.Context, id string) bool {
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
// and the sold-out short cut never wait for Redis: while it runs, a read serves the snapshot
// it has unless the loop is behind by maxStale (Redis unreachable), where a read
// refreshes itself as it does without the loop.
func (s *Store) RunSnapshot(ctx context.Context) {
	s.looping.Add(1)
	defer s.looping.Add(-1)
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
	fresh := s.opt.SnapshotInterval
	if s.looping.Load() > 0 {
		// The loop refreshes: a read that finds it a little late (a tick delayed on a busy
		// machine, a refresh longer than the last) does not wait for one, which at 10,000
		// items means waiting for a copy of the snapshot.
		fresh = max(maxStale, 2*s.opt.SnapshotInterval)
	}
	if snap != nil && time.Since(at) < fresh {
		return snap, gen, nil
	}
	if err := s.refresh(ctx); err != nil {
		if snap != nil && time.Since(at) < maxStale {
			return snap, gen, nil // serve slightly stale data through a blip
		}
		return nil, 0, err
	}
	s.snapMu.RLock()
	defer s.snapMu.RUnlock()
	return s.snap, s.snapGen, nil
}

// refresh brings the snapshot up to date, one loader at a time: the whole catalogue first,
// then only what each shard's change log shows past the clock last seen. When a node's
// replication id changed, the whole catalogue is read again and replaces the snapshot,
// versions notwithstanding (docs/design.md, "The primary of record").
func (s *Store) refresh(ctx context.Context) error {
	done := s.snapLoad.DoChan("snap", func() (any, error) {
		ctx, cancel := context.WithTimeout(ctx, loadTimeout)
		defer cancel()
		seen := time.Now() // before the reads: the age of what they tell the sold-out short cut
		hist, err := s.nodeHistories(ctx)
		if err != nil {
			return nil, err
		}
		switch {
		case s.clocks == nil:
			err = s.loadAll(ctx, seen, false)
		case !slices.Equal(hist, s.histories):
			slog.Warn("inventory: the Redis primary changed (failover or restart); reloading the catalogue from it")
			err = s.loadAll(ctx, seen, true)
		default:
			err = s.loadChanged(ctx, seen)
		}
		if err == nil {
			s.histories = hist
		}
		return nil, err
	})
	s.snapMu.RLock()
	patience := refreshWait
	if s.snap == nil {
		patience = loadTimeout // nothing to serve meanwhile: the first load is worth its time
	}
	s.snapMu.RUnlock()
	wait := time.NewTimer(patience)
	defer wait.Stop()
	select {
	case r := <-done:
		return r.Err
	case <-wait.C:
		return errors.New("inventory: catalogue refresh still running")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// nodeHistories returns, per shard, the replication id of the primary serving it (INFO
// replication's master_replid): a node's id changes when it is promoted or restarted.
func (s *Store) nodeHistories(ctx context.Context) ([]string, error) {
	out := make([]string, keyspace.Shards)
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		id, err := replID(ctx, s.rdb)
		if err != nil {
			return nil, err
		}
		for n := range out {
			out[n] = id
		}
		return out, nil
	}
	byNode := map[string]string{}
	for n := range out {
		node, err := cc.MasterForKey(ctx, s.keys.Shard(n).Clock())
		if err != nil {
			return nil, fmt.Errorf("inventory: primary of shard %d: %w", n, err)
		}
		addr := node.Options().Addr
		id, seen := byNode[addr]
		if !seen {
			if id, err = replID(ctx, node); err != nil {
				return nil, err
			}
			byNode[addr] = id
		}
		out[n] = id
	}
	return out, nil
}

// replID reads a node's replication id.
func replID(ctx context.Context, c redis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("inventory: INFO replication: %w", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_replid:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// loadAll reads every shard's clock, then every item (SMEMBERS of the catalogue, one
// pipelined HGETALL per item). Clocks first: a change made during the item reads is read
// again by the next loadChanged, never missed. With reset, what it read replaces the snapshot
// whole: the data it read is the primary of record's, whatever versions the snapshot holds.
func (s *Store) loadAll(ctx context.Context, seen time.Time, reset bool) error {
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
	s.install(snap, nil, reset)
	s.clocks = clocks
	return nil
}

// loadChanged reads the items each shard's change log names past the clock last seen.
func (s *Store) loadChanged(ctx context.Context, seen time.Time) error {
	pipe := s.rdb.Pipeline()
	logs := make([]*redis.ZSliceCmd, keyspace.Shards)
	heads := make([]*redis.StringCmd, keyspace.Shards)
	for n := range keyspace.Shards {
		logs[n] = pipe.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: s.keys.Shard(n).Changed(), Start: "(" + strconv.FormatInt(s.clocks[n], 10), Stop: "+inf", ByScore: true,
		})
		heads[n] = pipe.Get(ctx, s.keys.Shard(n).Clock())
	}
	var scan *redis.ScanCmd
	if len(s.sweep.pending) == 0 {
		scan = pipe.SScan(ctx, s.keys.Catalog(), s.sweep.cursor, "", sweepStep)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("inventory: change logs: %w", err)
	}
	for n, head := range heads {
		// A shard clock below the one last seen went back: a failover promoted a replica that
		// lacks the last changes and whose time is behind the old primary's, or the data was
		// lost or restored. Changes since may carry clocks below the one seen, which the log
		// query would skip: read the whole catalogue again.
		if c, _ := head.Int64(); c < s.clocks[n] {
			slog.Warn("inventory: a change clock went back (failover or data loss); reloading the catalogue", "shard", n, "clock", c, "seen", s.clocks[n])
			return s.loadAll(ctx, seen, true)
		}
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
	changed := len(ids)
	if scan != nil {
		s.sweep.scanned(scan.Val())
	}
	swept, ended := s.sweep.take()
	ids = append(ids, swept...)
	if ended {
		ids = append(ids, s.sweep.unseen(s.currentIDs())...)
	}
	read, err := s.readItems(ctx, ids)
	if err != nil {
		return err
	}
	for _, id := range ids[changed:] {
		// Re-read by the sweep: keep it only when it differs, so the generation stays put.
		if cur, ok := s.current(id); ok == (read[id] != nil) && (!ok || cur.Version == read[id].Version) {
			delete(read, id)
		}
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
	s.install(nil, read, false)
	s.clocks = clocks
	if ended {
		s.sweep.seen = nil
	}
	return nil
}

// sweepStep is how many catalogue items each refresh re-reads besides the changed ones, a
// few HGETALLs a refresh whatever the catalogue's size (also SSCAN's COUNT hint).
const sweepStep = 8

// sweepState is the slow full pass behind the change logs, the safety net for what no script
// writes (a FLUSHDB, a key deleted by hand, a failover that lost writes): each refresh re-reads
// the next sweepStep items (SSCAN), and a finished pass re-reads, and so drops, the items it
// never met (docs/design.md, "The slow sweep").
type sweepState struct {
	cursor  uint64
	pending []string            // scanned, not read yet
	last    bool                // pending holds the pass's last SSCAN reply
	seen    map[string]struct{} // items this pass has read
}

// scanned records an SSCAN reply (taken only when nothing is pending).
func (w *sweepState) scanned(ids []string, cursor uint64) {
	w.pending = append(w.pending, ids...)
	w.cursor, w.last = cursor, cursor == 0
}

// take returns the next items to re-read, and whether they end the pass.
func (w *sweepState) take() (ids []string, ended bool) {
	n := min(sweepStep, len(w.pending))
	ids, w.pending = w.pending[:n:n], w.pending[n:]
	if w.seen == nil {
		w.seen = map[string]struct{}{}
	}
	for _, id := range ids {
		w.seen[id] = struct{}{}
	}
	return ids, w.last && len(w.pending) == 0
}

// unseen returns the ids of the snapshot that the pass ending now never met. SSCAN returns
// every member present for the whole pass, so these were removed or added meanwhile; one read
// tells which.
func (w *sweepState) unseen(snapshot []string) []string {
	var out []string
	for _, id := range snapshot {
		if _, ok := w.seen[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// currentIDs lists the snapshot's item ids.
func (s *Store) currentIDs() []string {
	s.snapMu.RLock()
	defer s.snapMu.RUnlock()
	ids := make([]string, 0, len(s.snap))
	for id := range s.snap {
		ids = append(ids, id)
	}
	return ids
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

// install publishes all (a full load) or the current snapshot with changes applied (nil: the
// item is gone). An item is never replaced with an older version, unless reset says all is the
// new primary of record's. The generation moves only when something changed, so what readers
// derive from it stays cached.
func (s *Store) install(all map[string]Item, changes map[string]*Item, reset bool) {
	if all == nil && len(changes) == 0 {
		s.snapMu.Lock()
		s.snapAt = time.Now()
		s.snapMu.Unlock()
		return
	}
	s.swap(true, func(base map[string]Item) map[string]Item {
		if all != nil && reset {
			return all
		}
		if all != nil {
			for id, cur := range base {
				if it, ok := all[id]; ok && cur.Version > it.Version {
					all[id] = cur
				}
			}
			return all
		}
		next := make(map[string]Item, len(base)+len(changes))
		for id, it := range base {
			next[id] = it
		}
		for id, it := range changes {
			if it == nil {
				delete(next, id)
			} else if cur, ok := base[id]; !ok || cur.Version <= it.Version {
				next[id] = *it
			}
		}
		return next
	})
}

// swap replaces the snapshot with build(current snapshot); build returns nil for no change and
// must not modify its argument. It builds outside the lock, so purchases never wait for the copy
// of a large catalogue, and again under it only if another swap landed meanwhile. refreshed
// marks the snapshot as just read from Redis.
func (s *Store) swap(refreshed bool, build func(base map[string]Item) map[string]Item) {
	s.snapMu.RLock()
	base, gen := s.snap, s.snapGen
	s.snapMu.RUnlock()
	next := build(base)
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.snapGen != gen {
		next = build(s.snap)
	}
	if refreshed {
		s.snapAt = time.Now()
	}
	if next != nil {
		s.snap = next
		s.snapGen++
	}
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

// update puts items into the snapshot (one copy on write for them all), each unless the
// snapshot already holds a newer version of it.
func (s *Store) update(items ...Item) {
	if len(items) == 0 {
		return
	}
	for _, it := range items {
		if it.StockLeft > 0 {
			s.soldOut.Delete(it.ID)
		}
	}
	s.swap(false, func(base map[string]Item) map[string]Item {
		if base == nil {
			return nil
		}
		next, copied := base, false
		for _, it := range items {
			if cur, ok := next[it.ID]; ok && cur.Version > it.Version {
				continue
			}
			if !copied {
				next, copied = make(map[string]Item, len(base)+len(items)), true
				maps.Copy(next, base)
			}
			next[it.ID] = it
		}
		if !copied {
			return nil
		}
		return next
	})
}

package queue

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/batch"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
)

var errNoReply = errors.New("queue: script reply malformed")

type joinCall struct {
	ctx   context.Context
	user  string
	score uint64
	done  chan joinReply
}

type joinReply struct {
	packed string
	seen   int64
	err    error
}

func (c *joinCall) Context() context.Context { return c.ctx }
func (c *joinCall) Fail(err error)           { c.done <- joinReply{err: err} }

// randomScore is a pre-start joiner's place in the shuffle: 52 random bits from the CSPRNG
// (a zset score holds integers exactly below 2^53; lua/queue/ticket.lua), drawn at the join and
// never shown, so no shopper can predict or influence where they land.
func randomScore() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("queue: no randomness: %v", err))
	}
	return binary.LittleEndian.Uint64(b[:]) >> 12
}

// Join puts user in item's line (or returns the ticket they have). Concurrent joins of one
// item are coalesced into one script call; numbers are handed out inside it, so there are no
// gaps however many join at once.
func (s *Store) Join(ctx context.Context, item, user string) (Ticket, error) {
	if !keyspace.ValidID(item) {
		return Ticket{}, inventory.ErrNotFound
	}
	if !keyspace.ValidID(user) {
		return Ticket{}, fmt.Errorf("%w: bad user id", inventory.ErrInvalid)
	}
	if !s.cat.Known(ctx, item) {
		return Ticket{}, inventory.ErrNotFound
	}
	c := &joinCall{ctx: ctx, user: user, score: randomScore(), done: make(chan joinReply, 1)}
	s.joins.Submit(item, c)
	var r joinReply
	select {
	case r = <-c.done:
	case <-ctx.Done():
		return Ticket{}, fmt.Errorf("queue: join %s: %w (%w)", item, exactlyonce.ErrOutcomeUnknown, ctx.Err())
	}
	if r.err != nil {
		return Ticket{}, r.err
	}
	t, ok := unpackTicket(r.packed)
	if !ok {
		return Ticket{}, errNoReply
	}
	now := time.Now()
	v := s.view(item, now)
	if v == nil {
		it, err := s.cat.Lookup(ctx, item)
		if err != nil {
			return Ticket{}, err
		}
		v = &lineView{status: statusOf(it, now), starts: startOf(it)}
		if v.status == lineLive && t.line == 0 {
			v.status = lineFixing
		}
	}
	view := *v
	view.admitted = max(view.admitted, r.seen)
	return s.render(item, user, t, &view, now), nil
}

func startOf(it inventory.Item) time.Time {
	if it.StartsAt == nil {
		return time.Time{}
	}
	return *it.StartsAt
}

// runJoins sends one queue/join.lua call for joins of one item (callers that have gone are
// dropped first: nobody would learn their ticket).
func (s *Store) runJoins(item string, calls []*joinCall) {
	calls = batch.Live(calls)
	if len(calls) == 0 {
		return
	}
	k := s.keys.Item(item)
	args := make([]any, 0, 1+2*len(calls))
	args = append(args, item)
	for _, c := range calls {
		args = append(args, c.user, strconv.FormatUint(c.score, 10))
	}
	res, err := joinScript.Run(context.Background(), s.rdb,
		[]string{k.Hash(), k.QueueLine(), k.QueueTickets(), k.QueueState(), k.Outbox()}, args...).Slice()
	if err == nil && len(res) != 2+len(calls) {
		err = errNoReply
	}
	if err != nil {
		err = fmt.Errorf("queue: join %s: %w", item, err)
		for _, c := range calls {
			c.done <- joinReply{err: err}
		}
		return
	}
	seen, _ := res[1].(int64)
	for i, c := range calls {
		f, ok := res[2+i].([]any)
		if !ok || len(f) != 2 {
			c.done <- joinReply{err: errNoReply}
			continue
		}
		outcome, _ := f[0].(string)
		packed, _ := f[1].(string)
		var err error
		switch outcome {
		case "joined", "existing":
		case "not_found":
			err = inventory.ErrNotFound
		case "no_queue":
			err = ErrNoQueue
		case "sale_ended":
			err = inventory.ErrSaleEnded
		default:
			err = fmt.Errorf("queue: unknown join outcome %q", outcome)
		}
		c.done <- joinReply{packed: packed, seen: seen, err: err}
	}
}

// Read reads user's ticket for item from Redis (one pipelined round trip).
func (s *Store) Read(ctx context.Context, item, user string) (Ticket, error) {
	if !keyspace.ValidID(item) {
		return Ticket{}, inventory.ErrNotFound
	}
	k := s.keys.Item(item)
	pipe := s.rdb.Pipeline()
	tcmd := pipe.HGet(ctx, k.QueueTickets(), user)
	scmd := pipe.HMGet(ctx, k.QueueState(), "popped", "pre", "fixed")
	icmd := pipe.HMGet(ctx, k.Hash(), "stock_total", "stock_left", "reserved", "starts_at", "ends_at", "q_rate", "archived_at")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Ticket{}, fmt.Errorf("queue: read %s: %w", item, err)
	}
	now := time.Now()
	num := func(v any) int64 { s, _ := v.(string); n, _ := strconv.ParseInt(s, 10, 64); return n }
	f := icmd.Val()
	if len(f) != 7 || f[0] == nil {
		return Ticket{}, inventory.ErrNotFound
	}
	if num(f[5]) <= 0 {
		return Ticket{}, ErrNoQueue
	}
	packed, err := tcmd.Result()
	if errors.Is(err, redis.Nil) {
		return Ticket{}, ErrNotJoined
	}
	t, ok := unpackTicket(packed)
	if !ok {
		return Ticket{}, errNoReply
	}
	st := scmd.Val()
	v := lineView{admitted: num(st[0]), at: now}
	if ms := num(f[3]); ms > 0 {
		v.starts = time.UnixMilli(ms)
	}
	switch {
	case num(f[6]) > 0: // archived: off sale for good, its tickets read sold_out
		v.status = lineSoldOut
	case now.Before(v.starts):
		v.status = lineUpcoming
	case num(f[4]) > 0 && now.UnixMilli() >= num(f[4]):
		v.status = lineEnded
	case num(f[1]) <= 0 && num(f[2]) <= 0:
		v.status = lineSoldOut
	case num(st[2]) < num(st[1]):
		v.status = lineFixing
	default:
		v.status = lineLive
	}
	if mem := s.view(item, now); mem != nil {
		v.rate = mem.rate
	}
	return s.render(item, user, t, &v, now), nil
}

// AdmitResult is what one admission step did and saw.
type AdmitResult struct {
	Status      string // none, upcoming, fixing, live, sold_out, ended
	Admitted    int64  // shoppers ever admitted from the line
	Waiting     int64
	Live        int64 // unspent, unexpired passes
	AdmittedNow int64
	StockLeft   int64
	At          time.Time // Redis time of the step
}

// Admission limits per script call: admissions, pre-start tickets numbered, expired passes
// cleared. They bound how long one call blocks Redis.
const (
	admitPerCall  = 10000
	numberPerCall = 5000
	expirePerCall = 1000
)

// Admit runs one admission step for item (lua/queue/admit.lua) and updates this instance's
// view of the line. Every instance runs it on every tick; Redis decides.
func (s *Store) Admit(ctx context.Context, item string, starts time.Time) (AdmitResult, error) {
	k := s.keys.Item(item)
	res, err := admitScript.Run(ctx, s.rdb, []string{k.Hash(), k.QueueLine(), k.QueueTickets(),
		k.QueueState(), k.QueuePasses(), k.QueueRecent(), k.Outbox()}, admitPerCall, numberPerCall, expirePerCall, item).Slice()
	if err != nil {
		return AdmitResult{}, fmt.Errorf("queue: admit %s: %w", item, err)
	}
	if len(res) != 7 {
		return AdmitResult{}, errNoReply
	}
	n := func(i int) int64 { x, _ := res[i].(int64); return x }
	st, _ := res[0].(string)
	r := AdmitResult{Status: st, Admitted: n(2), Waiting: n(3), Live: n(4), AdmittedNow: n(5), StockLeft: n(6),
		At: time.UnixMilli(n(1))}
	s.observe(item, lineView{status: r.Status, admitted: r.Admitted, waiting: r.Waiting, live: r.Live,
		starts: starts, at: time.Now()})
	return r, nil
}

// LineStats is an item's line as the admin page shows it.
type LineStats struct {
	Status   string  `json:"status"`
	Waiting  int64   `json:"waiting"`
	Admitted int64   `json:"admitted"`
	Live     int64   `json:"live_passes"`
	Rate     float64 `json:"admit_rate"` // measured admissions per second (0: none recently)
}

// Stats reads an item's line: its length, shoppers admitted, live passes.
func (s *Store) Stats(ctx context.Context, item string) (LineStats, error) {
	if !keyspace.ValidID(item) {
		return LineStats{}, inventory.ErrNotFound
	}
	it, err := s.cat.Lookup(ctx, item)
	if err != nil {
		return LineStats{}, err
	}
	k := s.keys.Item(item)
	pipe := s.rdb.Pipeline()
	w := pipe.ZCard(ctx, k.QueueLine())
	a := pipe.HGet(ctx, k.QueueState(), "popped")
	p := pipe.ZCount(ctx, k.QueuePasses(), strconv.FormatInt(time.Now().UnixMilli()+1, 10), "+inf")
	sp := pipe.HGet(ctx, k.QueueTickets(), "#spent")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return LineStats{}, fmt.Errorf("queue: stats %s: %w", item, err)
	}
	adm, _ := strconv.ParseInt(a.Val(), 10, 64)
	spent, _ := strconv.ParseInt(sp.Val(), 10, 64)
	st := LineStats{Status: statusOf(it, time.Now()), Waiting: w.Val(), Admitted: adm, Live: max(0, p.Val()-spent)}
	if v := s.view(item, time.Now()); v != nil {
		st.Rate = v.rate
		st.Status = v.status
	}
	return st, nil
}

// Run admits on every tick until ctx ends: one queue/admit.lua call per item with a waiting
// room (items without one cost nothing), more at once while the start numbers a large
// shuffled group. Items whose sale ended over a minute ago are left alone.
func (s *Store) Run(ctx context.Context) {
	t := time.NewTicker(s.opt.Tick)
	defer t.Stop()
	lastForget := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.Tick(ctx)
		if now := time.Now(); now.Sub(lastForget) > 10*time.Second {
			s.forgetSpent(now)
			lastForget = now
		}
	}
}

// Tick runs one admission step of every item with a waiting room.
func (s *Store) Tick(ctx context.Context) {
	items, err := s.cat.Queued(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	for _, it := range items {
		if it.EndsAt != nil && now.Sub(*it.EndsAt) > time.Minute {
			continue
		}
		for range 100 {
			r, err := s.Admit(ctx, it.ID, startOf(it))
			if err != nil {
				if !errors.Is(err, exactlyonce.ErrTooFewReplicas) && !errors.Is(err, exactlyonce.ErrPrimaryUnconfirmed) { // said by /readyz and the replica watch
					slog.Warn("queue admission step failed", "item", it.ID, "err", err)
				}
				break
			}
			if r.Status != lineFixing {
				break
			}
		}
	}
}

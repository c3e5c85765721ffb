package redisconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
)

// WatchInterval is how often the primaries and their replicas are looked at (INFO replication
// on each primary): the age of the "too few live replicas" verdict, and of a primary change.
const WatchInterval = 250 * time.Millisecond

// maxReplicaLag is the most seconds since a replica's last acknowledgement (INFO's lag; they
// acknowledge every second) for it to count as live: a stalled replica stops counting within
// a few seconds, so changes are refused ("nothing was changed") instead of timing out in WAIT
// ("the outcome is unknown").
const maxReplicaLag = 2

var failovers atomic.Uint64

// Failovers counts the primary changes every watch in this process has seen (a Sentinel
// promotion, a cluster master replaced by its replica): flashsale_redis_failovers_total.
func Failovers() uint64 { return failovers.Load() }

// watch follows the primaries behind one client (and the clients WithPool made from it): who
// they are, and how many live replicas each has. A primary change is logged once, counted and
// the scripts are loaded on the new primary. It implements lua.Replicas.
type watch struct {
	rdb redis.UniversalClient
	opt Options

	view atomic.Pointer[view]

	mu     sync.Mutex
	shared []redis.UniversalClient // WithPool's clients, registered with lua alike
}

// view is one look at the primaries.
type view struct {
	live      map[string]int // live replicas by primary address
	primaries string         // the primaries' addresses, sorted, comma-separated
	err       error          // the last look failed (kept up to a few failures)
	at        time.Time
}

var watches sync.Map // redis.UniversalClient -> *watch

func watchOf(rdb redis.UniversalClient) *watch {
	if v, ok := watches.Load(rdb); ok {
		return v.(*watch)
	}
	return nil
}

// watchReplication starts the watch of rdb's primaries when there is something to follow (a
// Sentinel primary, a cluster's masters) or replicas are required; with replicas required,
// the first look must succeed (so a misconfigured start fails at once), and lua requires them
// of rdb's state changes.
func watchReplication(ctx context.Context, rdb redis.UniversalClient, o Options) error {
	if o.AckReplicas < 1 && len(o.Sentinels) == 0 && len(o.Addrs) < 2 {
		return nil // one node, nothing required: nothing to follow (WithPool copies its options)
	}
	w := &watch{rdb: rdb, opt: o}
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	v := w.look(lctx, nil)
	cancel()
	if v.err != nil && o.AckReplicas > 0 {
		return fmt.Errorf("redis: the replicas of the primary cannot be read (INFO replication): %w", v.err)
	}
	w.view.Store(v)
	watches.Store(rdb, w)
	if o.AckReplicas > 0 {
		lua.RequireReplicas(rdb, w)
		if err := w.Ready(); err != nil {
			slog.Warn("redis: too few live replicas; state changes are refused until there are enough", "err", err)
		}
	}
	go w.run()
	return nil
}

// share registers c, a client to the same servers, with this watch.
func (w *watch) share(c redis.UniversalClient) {
	w.mu.Lock()
	w.shared = append(w.shared, c)
	w.mu.Unlock()
	watches.Store(c, w)
	if w.opt.AckReplicas > 0 {
		lua.RequireReplicas(c, w)
	}
}

// run looks every WatchInterval until the client is closed.
func (w *watch) run() {
	t := time.NewTicker(WatchInterval)
	defer t.Stop()
	// The primaries of the last complete look: a change is counted between two complete
	// looks, so a primary that is down for a while (partial looks) counts once.
	complete := ""
	if v := w.view.Load(); v.err == nil {
		complete = v.primaries
	}
	for range t.C {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v := w.look(ctx, w.view.Load())
		cancel()
		if errors.Is(v.err, redis.ErrClosed) {
			w.stop()
			return
		}
		w.view.Store(v)
		if v.err != nil || v.primaries == "" || v.primaries == complete {
			continue
		}
		from := complete
		complete = v.primaries
		if from != "" {
			failovers.Add(1)
			slog.Warn("redis: the primary changed", "from", from, "to", v.primaries, "sentinels", w.opt.Sentinels)
			// The script cache is not replicated: load the scripts on the new primary now
			// (calls meanwhile fall back to EVAL on NOSCRIPT).
			lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := lua.Load(lctx, w.rdb); err != nil {
				slog.Warn("redis: loading the scripts on the new primary failed; calls send their bodies until it works", "err", err)
			}
			cancel()
		}
	}
}

func (w *watch) stop() {
	watches.Delete(w.rdb)
	lua.RequireReplicas(w.rdb, nil)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.shared {
		watches.Delete(c)
		lua.RequireReplicas(c, nil)
	}
}

// look reads INFO replication of every primary. A failed look keeps the previous view for up
// to a second (a blip must not refuse sales), then counts no live replica.
func (w *watch) look(ctx context.Context, prev *view) *view {
	v := &view{live: map[string]int{}, at: time.Now()}
	var mu sync.Mutex
	add := func(addr, info string) {
		if role(info) != "master" {
			return // a demoted primary not yet dropped by the client
		}
		mu.Lock()
		v.live[addr] = liveReplicas(info)
		mu.Unlock()
	}
	switch c := w.rdb.(type) {
	case *redis.ClusterClient:
		v.err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			info, err := m.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			add(m.Options().Addr, info)
			return nil
		})
		if v.err != nil {
			c.ReloadState(ctx) // a master gone: learn who replaced it
		}
	case *redis.Client:
		addr := c.Options().Addr
		pipe := c.Pipeline()
		info := pipe.Info(ctx, "replication")
		var self *redis.Cmd
		if len(w.opt.Sentinels) > 0 {
			self = pipe.Do(ctx, "CLIENT", "INFO") // which primary the failover client reached
		}
		if _, v.err = pipe.Exec(ctx); v.err == nil {
			if self != nil {
				addr = field(self.String(), "laddr=")
			}
			add(addr, info.Val())
		}
	default:
		v.err = fmt.Errorf("redisconn: cannot watch a %T", w.rdb)
	}
	addrs := make([]string, 0, len(v.live))
	for a := range v.live {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	v.primaries = strings.Join(addrs, ",")
	if v.err != nil && prev != nil && time.Since(prev.at) < time.Second && !errors.Is(v.err, redis.ErrClosed) {
		kept := *prev
		kept.err = v.err
		return &kept
	}
	return v
}

// role is INFO replication's role: master or slave.
func role(info string) string { return field(info, "role:") }

// field returns the value after prefix (at a line start or after a space) up to the end of
// its line or word.
func field(s, prefix string) string {
	for _, line := range strings.Split(s, "\n") {
		for _, word := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(word, prefix); ok {
				return v
			}
		}
	}
	return ""
}

// liveReplicas counts INFO replication's replicas that are online and acknowledged within
// maxReplicaLag seconds: "slave0:ip=...,port=...,state=online,offset=...,lag=0".
func liveReplicas(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, ":ip=") {
			continue
		}
		_, attrs, _ := strings.Cut(line, ":")
		online, lag := false, -1
		for _, kv := range strings.Split(attrs, ",") {
			k, val, _ := strings.Cut(kv, "=")
			switch k {
			case "state":
				online = val == "online"
			case "lag":
				lag, _ = strconv.Atoi(val)
			}
		}
		if online && lag >= 0 && lag <= maxReplicaLag {
			n++
		}
	}
	return n
}

// Required is lua.Replicas: how many replicas must hold a change, and how long WAIT waits.
func (w *watch) Required() (int, time.Duration) { return w.opt.AckReplicas, w.opt.AckTimeout }

// Admit is lua.Replicas: ErrTooFewReplicas when the primary serving key had fewer live
// replicas than required at the last look.
func (w *watch) Admit(ctx context.Context, key string) error {
	v := w.view.Load()
	var live int
	if c, ok := w.rdb.(*redis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return fmt.Errorf("%w (%v)", lua.ErrTooFewReplicas, err)
		}
		live = v.live[node.Options().Addr]
	} else {
		for _, n := range v.live { // one primary
			live = n
		}
	}
	if live < w.opt.AckReplicas {
		return fmt.Errorf("%w (%d live of %d required)", lua.ErrTooFewReplicas, live, w.opt.AckReplicas)
	}
	return nil
}

// Ready reports, for /readyz, a primary with fewer live replicas than required (or none
// reachable), saying which.
func (w *watch) Ready() error {
	if w.opt.AckReplicas < 1 {
		return nil
	}
	v := w.view.Load()
	if len(v.live) == 0 {
		return fmt.Errorf("no Redis primary could be read (%v): changes cannot be confirmed by %d replicas", v.err, w.opt.AckReplicas)
	}
	for _, addr := range strings.Split(v.primaries, ",") {
		if n := v.live[addr]; n < w.opt.AckReplicas {
			return fmt.Errorf("the Redis primary %s has %d live replicas of the %d FLASHSALE_REDIS_ACK_REPLICAS requires: changes are refused", addr, n, w.opt.AckReplicas)
		}
	}
	return nil
}

// Ready reports whether rdb's primaries have the replicas its changes require (nil when none
// are required): /readyz fails while they do not.
func Ready(rdb redis.UniversalClient) error {
	if w := watchOf(rdb); w != nil && w.view.Load() != nil {
		return w.Ready()
	}
	return nil
}

// Primaries returns the addresses of rdb's primaries at the last look ("" when not watched).
func Primaries(rdb redis.UniversalClient) string {
	if w := watchOf(rdb); w != nil {
		if v := w.view.Load(); v != nil {
			return v.primaries
		}
	}
	return ""
}

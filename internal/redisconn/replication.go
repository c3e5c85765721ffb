package redisconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
)

// WatchInterval is how often the primaries and their replicas are looked at (the Sentinels'
// answers, INFO replication on each primary): the age of a refusal's verdict, and of a primary
// change.
const WatchInterval = 250 * time.Millisecond

// maxReplicaLag is the most seconds since a replica's last acknowledgement (INFO's lag; they
// acknowledge every second) for it to count as connected: a stalled or cut-off replica stops
// counting within a few seconds, so changes are refused ("nothing was changed") instead of
// timing out in WAIT ("the outcome is unknown").
const maxReplicaLag = 2

// AckAuto as Options.AckReplicas: every replica that could be promoted must hold a change
// (behind Sentinels or a Cluster); none on a lone node.
const AckAuto = -1

var failovers, refusalPeriods atomic.Uint64

// Failovers counts the primary changes every watch in this process has seen (a Sentinel
// promotion, a cluster master replaced by its replica): flashsale_redis_failovers_total.
func Failovers() uint64 { return failovers.Load() }

// RefusalPeriods counts the periods in which a watch refused every change before it ran (the
// primary not confirmed, a replica that could be promoted not connected, too few replicas):
// flashsale_redis_refusal_periods_total. Each is logged once as it begins and once as it ends.
func RefusalPeriods() uint64 { return refusalPeriods.Load() }

// watch follows the primaries behind one client (and the clients WithPool made from it): who
// they are, which replicas must hold a change, and whether changes are refused. A primary
// change is logged once, counted and the scripts are loaded on the new primary. It implements
// exactlyonce.Replicas.
type watch struct {
	rdb  redis.UniversalClient
	opt  Options
	sent *sentinels // nil without Sentinels

	view   atomic.Pointer[view]
	lastSV sentinelView // the last look at the Sentinels in which a majority answered

	mu     sync.Mutex
	shared []redis.UniversalClient // WithPool's clients, registered with lua alike

	refusedSince atomic.Int64 // unix ns: the start of the refusal period under way (0: none)
}

// view is one look at the primaries.
type view struct {
	nodes     map[string]*primary // by primary address
	primaries string              // their addresses, sorted, comma-separated
	err       error               // the last look failed (kept up to a few failures)
	at        time.Time
}

// primary is what one look found of one primary.
type primary struct {
	wait   int   // replicas WAIT waits for behind a change
	refuse error // changes on it are refused before they run
}

var watches sync.Map // redis.UniversalClient -> *watch

func watchOf(rdb redis.UniversalClient) *watch {
	if v, ok := watches.Load(rdb); ok {
		return v.(*watch)
	}
	return nil
}

// auto reports whether the acknowledgement is every replica that could be promoted.
func (o Options) auto() bool { return o.AckReplicas == AckAuto }

// watched reports whether a client needs a watch: something to follow (Sentinels, a cluster)
// or replicas required of a lone node.
func (o Options) watched() bool {
	return len(o.Sentinels) > 0 || len(o.Addrs) > 1 || o.AckReplicas > 0
}

// newWatch makes the watch of a client about to be opened with o; with Sentinels, it asks them
// which node is primary first (the client dials that node), and checks the lease against their
// down-after time.
func newWatch(ctx context.Context, o Options) (*watch, error) {
	w := &watch{opt: o}
	if len(o.Sentinels) == 0 {
		return w, nil
	}
	w.sent = newSentinels(o)
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	sv := w.sent.look(lctx)
	cancel()
	if sv.primary == "" {
		w.sent.close()
		return nil, fmt.Errorf("redis: no majority of the Sentinels %v names a primary %q (%d of %d answered)", o.Sentinels, o.MasterName, sv.reached, w.sent.knownCount())
	}
	if sv.downMS > 0 && w.sent.lease >= time.Duration(sv.downMS)*time.Millisecond {
		w.sent.close()
		return nil, fmt.Errorf("%w: FLASHSALE_REDIS_SENTINEL_LEASE=%s is not shorter than the Sentinels' down-after-milliseconds %d: a deposed primary could go on acknowledging after the Sentinels promoted another; set it below %dms",
			ErrInvalidSetting, w.sent.lease, sv.downMS, sv.downMS)
	}
	if n := w.sent.knownCount(); n < 3 {
		slog.Warn("redis: fewer than 3 Sentinels are known: one lost Sentinel stops every change (a majority must name the primary)", "known", n)
	}
	w.lastSV = sv
	w.sent.follow(sv.primary)
	return w, nil
}

// start makes the first look at rdb (the client opened with w's options) and, when there is
// something to watch, registers w with lua and runs it until the client is closed.
func (w *watch) start(ctx context.Context, rdb redis.UniversalClient) error {
	w.rdb = rdb
	o := w.opt
	if !o.watched() {
		if o.auto() {
			warnLoneReplicas(ctx, rdb)
		}
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	v := w.look(lctx, nil)
	cancel()
	if v.err != nil && o.AckReplicas > 0 {
		return fmt.Errorf("redis: the replicas of the primary cannot be read (INFO replication): %w", v.err)
	}
	w.view.Store(v)
	watches.Store(rdb, w)
	exactlyonce.RequireReplicas(rdb, w)
	if err := w.Ready(); err != nil {
		slog.Warn("redis: changes are refused until this clears", "err", err)
	}
	go w.run()
	return nil
}

// warnLoneReplicas warns when a lone node (no Sentinels, no cluster) has replicas: with
// FLASHSALE_REDIS_ACK_REPLICAS=auto nothing waits for them, and nothing would promote them.
func warnLoneReplicas(ctx context.Context, rdb redis.UniversalClient) {
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return
	}
	if n, _ := strconv.Atoi(field(info, "connected_slaves:")); n > 0 {
		slog.Warn("redis: the primary has replicas but no Sentinels or cluster are configured: changes are acknowledged without them (FLASHSALE_REDIS_ACK_REPLICAS=auto means 0 here); set FLASHSALE_REDIS_SENTINELS to fail over safely", "replicas", n)
	}
}

// share registers c, a client to the same servers, with this watch.
func (w *watch) share(c redis.UniversalClient) {
	w.mu.Lock()
	w.shared = append(w.shared, c)
	w.mu.Unlock()
	watches.Store(c, w)
	exactlyonce.RequireReplicas(c, w)
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
	w.period()
	for range t.C {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v := w.look(ctx, w.view.Load())
		cancel()
		if errors.Is(v.err, redis.ErrClosed) {
			w.stop()
			return
		}
		w.view.Store(v)
		w.period()
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
			if err := exactlyonce.Load(lctx, w.rdb); err != nil {
				slog.Warn("redis: loading the scripts on the new primary failed; calls send their bodies until it works", "err", err)
			}
			cancel()
		}
	}
}

// period logs and counts a refusal period once as it begins, and says when it ends and how
// long it lasted.
func (w *watch) period() {
	err := w.Ready()
	if err != nil {
		_ = w.refusing(err)
		return
	}
	if since := w.refusedSince.Load(); since != 0 && w.refusedSince.CompareAndSwap(since, 0) {
		slog.Warn("redis: changes are accepted again", "refused_seconds",
			strconv.FormatFloat(time.Since(time.Unix(0, since)).Seconds(), 'f', 1, 64), "primaries", w.view.Load().primaries)
	}
}

// refusing begins a refusal period unless one is under way (a refusal Admit saw between two
// looks counts too), and returns err.
func (w *watch) refusing(err error) error {
	if w.refusedSince.Load() == 0 && w.refusedSince.CompareAndSwap(0, time.Now().UnixNano()) {
		refusalPeriods.Add(1)
		slog.Warn("redis: changes are refused (503, nothing was changed) until this clears", "reason", err.Error())
	}
	return err
}

func (w *watch) stop() {
	watches.Delete(w.rdb)
	exactlyonce.RequireReplicas(w.rdb, nil)
	if w.sent != nil {
		w.sent.close()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.shared {
		watches.Delete(c)
		exactlyonce.RequireReplicas(c, nil)
	}
}

// look asks the Sentinels (if any) which node is primary, follows it, and reads INFO
// replication of every primary. A failed read keeps the previous view for up to a second (a
// blip must not refuse sales), then refuses.
func (w *watch) look(ctx context.Context, prev *view) *view {
	v := &view{nodes: map[string]*primary{}, at: time.Now()}
	var mu sync.Mutex
	add := func(addr string, p *primary) {
		mu.Lock()
		v.nodes[addr] = p
		mu.Unlock()
	}
	switch c := w.rdb.(type) {
	case *redis.ClusterClient:
		v.err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			pipe := m.Pipeline()
			info := pipe.Info(ctx, "replication")
			nodes := pipe.ClusterNodes(ctx)
			state := pipe.ClusterInfo(ctx)
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			if role(info.Val()) != "master" {
				return nil // replaced, not yet dropped by the client
			}
			p := w.judge(info.Val(), clusterReplicas(nodes.Val()))
			if s := field(state.Val(), "cluster_state:"); s != "ok" && p.refuse == nil {
				p.refuse = fmt.Errorf("%w: the Redis Cluster master %s says cluster_state:%s (cut off from the majority?)", exactlyonce.ErrPrimaryUnconfirmed, m.Options().Addr, s)
			}
			add(m.Options().Addr, p)
			return nil
		})
		if v.err != nil {
			c.ReloadState(ctx) // a master gone: learn who replaced it
		}
	case *redis.Client:
		addr := c.Options().Addr
		var members []string
		if w.sent != nil {
			sv := w.sent.look(ctx)
			if sv.reached >= sv.majority {
				w.lastSV = sv
			}
			w.sent.follow(sv.primary)
			addr = w.sent.current()
			for _, m := range w.lastSV.members {
				if !w.lastSV.excluded[m] && m != addr {
					members = append(members, m)
				}
			}
		}
		info, err := c.Info(ctx, "replication").Result()
		switch {
		case err != nil:
			v.err = err
		case role(info) != "master":
			// A node the Sentinels name that has not yet taken the role (or a demoted one).
			add(addr, &primary{refuse: fmt.Errorf("%w: the node %s the Sentinels name is not a primary (role %s)", exactlyonce.ErrPrimaryUnconfirmed, addr, role(info))})
		default:
			add(addr, w.judge(info, members))
		}
	default:
		v.err = fmt.Errorf("redisconn: cannot watch a %T", w.rdb)
	}
	addrs := make([]string, 0, len(v.nodes))
	for a, p := range v.nodes {
		if !errors.Is(p.refuse, exactlyonce.ErrPrimaryUnconfirmed) || w.sent == nil {
			addrs = append(addrs, a)
		}
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

// judge decides, from a primary's INFO replication and the replicas that could be promoted
// (members), how many replicas WAIT waits for and whether changes are refused up front.
func (w *watch) judge(info string, members []string) *primary {
	connected := connectedReplicas(info)
	p := &primary{}
	if !w.opt.auto() {
		p.wait = w.opt.AckReplicas
		if len(connected) < p.wait {
			p.refuse = fmt.Errorf("%w (%d connected of %d required)", exactlyonce.ErrTooFewReplicas, len(connected), p.wait)
		}
		return p
	}
	// Every connected replica is waited for (one that can never be promoted counts towards
	// WAIT like any other, so waiting for fewer could count it instead of a member), and
	// every member must be among them.
	p.wait = len(connected)
	for _, m := range members {
		if !slices.Contains(connected, m) {
			p.wait++
			if p.refuse == nil {
				p.refuse = fmt.Errorf("%w: the replica %s could be promoted and is not connected to the primary, or lags (%d connected)", exactlyonce.ErrTooFewReplicas, m, len(connected))
			}
		}
	}
	return p
}

// clusterReplicas are the replicas of the master answering CLUSTER NODES ("myself,master")
// that the cluster's majority has not marked failed: the ones that could be promoted.
func clusterReplicas(nodes string) []string {
	var self string
	lines := strings.Split(strings.TrimSpace(nodes), "\n")
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 2 && slices.Contains(strings.Split(f[2], ","), "myself") {
			self = f[0]
		}
	}
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 4 || f[3] != self || self == "" {
			continue
		}
		flags := strings.Split(f[2], ",")
		if !slices.Contains(flags, "slave") || slices.Contains(flags, "fail") || slices.Contains(flags, "noaddr") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		out = append(out, addr)
	}
	return out
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

// connectedReplicas lists (ip:port) INFO replication's replicas that are online and
// acknowledged within maxReplicaLag seconds: "slave0:ip=...,port=...,state=online,offset=...,lag=0".
func connectedReplicas(info string) []string {
	var out []string
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, ":ip=") {
			continue
		}
		_, attrs, _ := strings.Cut(line, ":")
		online, lag := false, -1
		var ip, port string
		for _, kv := range strings.Split(attrs, ",") {
			k, val, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = val
			case "port":
				port = val
			case "state":
				online = val == "online"
			case "lag":
				lag, _ = strconv.Atoi(val)
			}
		}
		if online && lag >= 0 && lag <= maxReplicaLag {
			out = append(out, net.JoinHostPort(ip, port))
		}
	}
	return out
}

// Timeout is exactlyonce.Replicas: how long WAIT waits.
func (w *watch) Timeout() time.Duration { return w.opt.AckTimeout }

// Confirms is exactlyonce.Replicas: whether changes may wait for replicas.
func (w *watch) Confirms() bool { return w.opt.auto() || w.opt.AckReplicas > 0 }

// Admit is exactlyonce.Replicas: the replicas a change of key waits for, or why it is refused before
// it runs (the Sentinels' majority has not confirmed the primary within the lease, or names
// another node; a replica that could be promoted is not connected; too few replicas).
func (w *watch) Admit(ctx context.Context, key string) (int, error) {
	if w.sent != nil {
		if err := w.sent.leaseErr(); err != nil {
			return 0, w.refusing(fmt.Errorf("%w: %v", exactlyonce.ErrPrimaryUnconfirmed, err))
		}
	}
	v := w.view.Load()
	var p *primary
	if c, ok := w.rdb.(*redis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("%w (%v)", exactlyonce.ErrPrimaryUnconfirmed, err)
		}
		p = v.nodes[node.Options().Addr]
	} else if w.sent != nil {
		p = v.nodes[w.sent.current()]
	} else {
		for _, n := range v.nodes { // one primary
			p = n
		}
	}
	if p == nil {
		return 0, w.refusing(fmt.Errorf("%w: the primary could not be read (%v)", exactlyonce.ErrPrimaryUnconfirmed, v.err))
	}
	if p.refuse != nil {
		return 0, w.refusing(p.refuse)
	}
	return p.wait, nil
}

// Ready reports, for /readyz, why changes are refused now (nil: they are not).
func (w *watch) Ready() error {
	if w.sent != nil {
		if err := w.sent.leaseErr(); err != nil {
			return err
		}
	}
	v := w.view.Load()
	if len(v.nodes) == 0 {
		return fmt.Errorf("no Redis primary could be read (%v): changes are refused", v.err)
	}
	if w.sent != nil {
		if p := v.nodes[w.sent.current()]; p == nil {
			return fmt.Errorf("the Redis primary %s the Sentinels name was not read yet (%v)", w.sent.current(), v.err)
		}
	}
	addrs := make([]string, 0, len(v.nodes))
	for a := range v.nodes {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		if err := v.nodes[a].refuse; err != nil {
			return fmt.Errorf("changes on the Redis primary %s are refused: %w", a, err)
		}
	}
	return nil
}

// Ready reports whether changes through rdb are accepted now (the primary confirmed, the
// replicas they must reach connected): /readyz fails while they are not.
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

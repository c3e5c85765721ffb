package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrInvalidSetting marks a setting that can never work with the Redis found (a Sentinel lease
// not shorter than the Sentinels' down-after time): the binaries exit 2 on it, without retrying.
var ErrInvalidSetting = errors.New("invalid setting")

// sentinels is the Sentinels' side of a watch: which node a majority of every Sentinel known
// (a set that only grows, so a partition cannot shrink it) names primary, when, and what they
// say of its replicas. The data client dials the node the majority names, not the first
// Sentinel's answer (go-redis's failover client), which a cut-off Sentinel may get wrong.
type sentinels struct {
	name     string
	password string
	tls      *tls.Config
	lease    time.Duration

	mu      sync.Mutex
	known   []string
	clients map[string]*redis.SentinelClient

	primary   atomic.Pointer[string] // the node a majority named last ("" never)
	confirmed atomic.Int64           // unix ns of the start of the last look in which a majority named primary

	connMu sync.Mutex
	conns  map[*trackedConn]struct{}
}

// sentinelView is one look at the Sentinels.
type sentinelView struct {
	primary  string          // named by a majority ("" when no majority named one)
	reached  int             // Sentinels that answered
	majority int             // of those known
	excluded map[string]bool // replicas that cannot be promoted (every reached Sentinel lists them down, or priority 0)
	members  []string        // every replica the reached Sentinels list, excluded or not
	downMS   int64           // the smallest down-after-milliseconds reached
}

func newSentinels(o Options) *sentinels {
	s := &sentinels{name: o.MasterName, password: o.SentinelPassword, tls: o.Security.TLS,
		lease: o.SentinelLease, clients: map[string]*redis.SentinelClient{}, conns: map[*trackedConn]struct{}{}}
	for _, a := range o.Sentinels {
		if !slices.Contains(s.known, a) {
			s.known = append(s.known, a)
		}
	}
	empty := ""
	s.primary.Store(&empty)
	return s
}

func (s *sentinels) client(addr string) *redis.SentinelClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clients[addr]
	if c == nil {
		c = redis.NewSentinelClient(&redis.Options{Addr: addr, Password: s.password, TLSConfig: s.tls,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 2})
		s.clients[addr] = c
	}
	return c
}

func (s *sentinels) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		c.Close()
	}
	s.clients = map[string]*redis.SentinelClient{}
}

// sentinelAnswer is what one Sentinel said.
type sentinelAnswer struct {
	primary  string
	replicas []map[string]string
	others   []string
	downMS   int64
}

// look asks every known Sentinel at once, each within a second, and counts.
func (s *sentinels) look(ctx context.Context) sentinelView {
	started := time.Now()
	s.mu.Lock()
	known := slices.Clone(s.known)
	s.mu.Unlock()
	answers := make([]*sentinelAnswer, len(known))
	var wg sync.WaitGroup
	for i, addr := range known {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			answers[i] = s.ask(actx, s.client(addr))
		}()
	}
	wg.Wait()
	v := sentinelView{majority: len(known)/2 + 1, excluded: map[string]bool{}}
	named := map[string]int{}
	down := map[string]int{}
	var fresh []string
	for _, a := range answers {
		if a == nil {
			continue
		}
		v.reached++
		named[a.primary]++
		if a.downMS > 0 && (v.downMS == 0 || a.downMS < v.downMS) {
			v.downMS = a.downMS
		}
		for _, r := range a.replicas {
			addr := net.JoinHostPort(r["ip"], r["port"])
			if !slices.Contains(v.members, addr) {
				v.members = append(v.members, addr)
			}
			flags := strings.Split(r["flags"], ",")
			if slices.Contains(flags, "s_down") || slices.Contains(flags, "o_down") || slices.Contains(flags, "disconnected") {
				down[addr]++
			}
			if priority(r) == "0" {
				v.excluded[addr] = true // configured never to be promoted
			}
		}
		for _, o := range a.others {
			if !slices.Contains(known, o) && !slices.Contains(fresh, o) {
				fresh = append(fresh, o)
			}
		}
	}
	for addr, n := range named {
		if addr != "" && n >= v.majority {
			v.primary = addr
		}
	}
	if v.reached >= v.majority {
		for addr, n := range down {
			if n == v.reached {
				v.excluded[addr] = true // every Sentinel reached (a majority) says it is down
			}
		}
	}
	if len(fresh) > 0 {
		s.mu.Lock()
		for _, f := range fresh {
			if !slices.Contains(s.known, f) {
				s.known = append(s.known, f)
				slog.Info("redis: a Sentinel reported another Sentinel; the majority counts it", "sentinel", f, "known", len(s.known))
			}
		}
		s.mu.Unlock()
	}
	if v.primary != "" {
		s.confirmed.Store(started.UnixNano())
	}
	return v
}

// priority is a replica's replica-priority as a Sentinel lists it.
func priority(r map[string]string) string {
	if p, ok := r["replica-priority"]; ok {
		return p
	}
	return r["slave-priority"]
}

// ask is one Sentinel's answer, or nil when it did not answer in full.
func (s *sentinels) ask(ctx context.Context, c *redis.SentinelClient) *sentinelAnswer {
	hp, err := c.GetMasterAddrByName(ctx, s.name).Result()
	if err != nil || len(hp) != 2 {
		return nil
	}
	a := &sentinelAnswer{primary: net.JoinHostPort(hp[0], hp[1])}
	if a.replicas, err = c.Replicas(ctx, s.name).Result(); err != nil {
		return nil
	}
	others, err := c.Sentinels(ctx, s.name).Result()
	if err != nil {
		return nil
	}
	for _, o := range others {
		if o["ip"] != "" && o["port"] != "" {
			a.others = append(a.others, net.JoinHostPort(o["ip"], o["port"]))
		}
	}
	if m, err := c.Master(ctx, s.name).Result(); err == nil {
		a.downMS, _ = strconv.ParseInt(m["down-after-milliseconds"], 10, 64)
	}
	return a
}

// Known is how many Sentinels the majority is counted of.
func (s *sentinels) knownCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.known)
}

// current is the node the majority named last.
func (s *sentinels) current() string { return *s.primary.Load() }

// leaseErr is the refusal while no majority confirmed the primary within the lease.
func (s *sentinels) leaseErr() error {
	at := s.confirmed.Load()
	if at == 0 {
		return errors.New("no majority of the Sentinels has named a Redis primary yet")
	}
	if since := time.Since(time.Unix(0, at)); since > s.lease {
		return fmt.Errorf("no majority of the Sentinels confirmed the Redis primary %s for %s (FLASHSALE_REDIS_SENTINEL_LEASE %s)", s.current(), since.Round(time.Millisecond), s.lease)
	}
	return nil
}

// follow makes addr the node dialled, and closes every connection to another node (a change
// in flight on one fails, and is re-sent, to addr). It reports whether addr is new.
func (s *sentinels) follow(addr string) bool {
	if addr == "" || addr == s.current() {
		return false
	}
	s.primary.Store(&addr)
	s.connMu.Lock()
	var stale []*trackedConn
	for c := range s.conns {
		if c.addr != addr {
			stale = append(stale, c)
		}
	}
	s.connMu.Unlock()
	for _, c := range stale {
		_ = c.Close()
	}
	return true
}

// dial connects to the node the majority named last, whatever address go-redis passes.
func (s *sentinels) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	addr := s.current()
	if addr == "" {
		return nil, errors.New("redis: no majority of the Sentinels has named a primary")
	}
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 5 * time.Minute}
	var conn net.Conn
	var err error
	if s.tls != nil {
		td := &tls.Dialer{NetDialer: d, Config: s.tls}
		conn, err = td.DialContext(ctx, network, addr)
	} else {
		conn, err = d.DialContext(ctx, network, addr)
	}
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, addr: addr, s: s}
	s.connMu.Lock()
	s.conns[tc] = struct{}{}
	s.connMu.Unlock()
	if s.current() != addr { // the majority moved on while dialing
		_ = tc.Close()
		return nil, fmt.Errorf("redis: the Sentinels' majority now names %s, not %s", s.current(), addr)
	}
	if sc, ok := conn.(syscall.Conn); ok {
		// go-redis's pool checks an idle connection through its socket before handing it
		// out, so one closed by follow is dropped there, not on a command's first use.
		return &trackedSysConn{trackedConn: tc, sys: sc}, nil
	}
	return tc, nil
}

// trackedSysConn is a trackedConn whose socket go-redis's pool can check.
type trackedSysConn struct {
	*trackedConn
	sys syscall.Conn
}

func (c *trackedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sys.SyscallConn() }

// trackedConn is a connection to one node, closed when the majority names another.
type trackedConn struct {
	net.Conn
	addr string
	s    *sentinels
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.connMu.Lock()
		delete(c.s.conns, c)
		c.s.connMu.Unlock()
	})
	return c.Conn.Close()
}

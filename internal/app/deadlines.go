package app

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// CoarseDeadlines wraps a TCP listener so that a deadline net/http sets costs a store instead of
// re-arming the poller's timer (five times per request). One goroutine per listener applies the
// deadlines that passed every tick: timeouts keep their meaning, at most one tick late; a
// deadline already past is applied at once. Other connections pass through as they are.
func CoarseDeadlines(ln net.Listener, tick time.Duration) net.Listener {
	l := &coarseListener{Listener: ln, tick: tick, conns: map[*coarseConn]struct{}{}}
	l.now.Store(time.Now().UnixNano())
	go l.watch()
	return l
}

type coarseListener struct {
	net.Listener
	tick   time.Duration
	now    atomic.Int64 // the last sweep's time (Unix ns): a deadline before it is past
	mu     sync.Mutex
	conns  map[*coarseConn]struct{}
	closed bool // the listener is closed: the watch ends once its connections are
}

func (l *coarseListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	cc := &coarseConn{TCPConn: tc, l: l}
	l.mu.Lock()
	l.conns[cc] = struct{}{}
	l.mu.Unlock()
	return cc, nil
}

func (l *coarseListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return l.Listener.Close()
}

// watch sweeps every tick until the listener and all its connections are closed.
func (l *coarseListener) watch() {
	t := time.NewTicker(l.tick)
	defer t.Stop()
	for now := range t.C {
		if !l.sweep(now.UnixNano()) {
			return
		}
	}
}

// sweep fails the reads and writes whose deadline is before now; false once nothing is left
// to watch.
func (l *coarseListener) sweep(now int64) bool {
	l.now.Store(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		c.read.expire(now, c.TCPConn.SetReadDeadline)
		c.write.expire(now, c.TCPConn.SetWriteDeadline)
	}
	return !l.closed || len(l.conns) > 0
}

// coarseConn is a TCP connection whose deadlines the listener's watch enforces. Its real
// deadlines are only ever none, or in the past (its reads or writes fail).
type coarseConn struct {
	*net.TCPConn
	l           *coarseListener
	read, write coarseDeadline
}

func (c *coarseConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *coarseConn) SetReadDeadline(t time.Time) error {
	return c.read.set(t, c.l.now.Load(), c.TCPConn.SetReadDeadline)
}

func (c *coarseConn) SetWriteDeadline(t time.Time) error {
	return c.write.set(t, c.l.now.Load(), c.TCPConn.SetWriteDeadline)
}

func (c *coarseConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.TCPConn.Close()
}

// coarseDeadline is one direction's deadline.
type coarseDeadline struct {
	mu     sync.Mutex
	at     int64 // Unix ns; 0: none
	passed bool  // the real deadline is in the past
}

// set records t; one before now (the last sweep's time) is applied at once, and a real
// deadline the last one left in the past is cleared.
func (d *coarseDeadline) set(t time.Time, now int64, apply func(time.Time) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = 0
	if !t.IsZero() {
		if d.at = t.UnixNano(); d.at <= now {
			d.passed = true
			return apply(t)
		}
	}
	if d.passed {
		d.passed = false
		return apply(time.Time{})
	}
	return nil
}

// longAgo is the real deadline of a connection whose deadline passed.
var longAgo = time.Unix(1, 0)

// expire puts the real deadline in the past when the recorded one is before now.
func (d *coarseDeadline) expire(now int64, apply func(time.Time) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at != 0 && d.at <= now && !d.passed {
		d.passed = true
		_ = apply(longAgo)
	}
}

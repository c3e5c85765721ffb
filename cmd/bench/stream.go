package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The catalogue stream rows: N shoppers holding GET /api/items/stream on one api, a stock
// change timed from the admin's write to its arrival on every stream, the api's memory with
// them all open, and the api's CPU per second streaming (one change a second) against the
// same shoppers polling GET /api/items once a second each.

const probeItem = "stream-probe" // the item whose stock the stream rows change

const (
	streamRowName = "catalogue stream: stock change → every stream"
	streamRSSName = "catalogue stream: api memory (RSS)"
	streamCPUName = "catalogue stream: api CPU/s, streaming vs polling 1/s"
)

// raiseFileLimit lifts the soft open-file limit to the hard one (children inherit it): the
// stream rows hold one connection per shopper on each side.
func raiseFileLimit(need uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, err
		}
	}
	if lim.Cur < need {
		return lim.Cur, fmt.Errorf("bench: open-file limit %d is below the %d the stream rows need (raise ulimit -Hn)", lim.Cur, need)
	}
	return lim.Cur, nil
}

func (b *bench) streams(ctx context.Context) error {
	n := 10000
	changes := 5
	cpuWindow := 10 * time.Second
	if b.opt.short {
		n, changes, cpuWindow = 200, 2, 2*time.Second
	}
	// The api keeps an eighth of its descriptors from streams (internal/app/fdlimit.go).
	if _, err := raiseFileLimit(uint64(n)*8/7 + 512); err != nil {
		return err
	}
	progress(b.out, "catalogue stream: opening %d streams", n)
	if err := b.admin2xx(ctx, "PUT", "/api/admin/items/"+probeItem, map[string]any{
		"name": "Stream probe", "category": "bench", "price_cents": 100, "stock": 1000, "per_user_limit": 1,
	}); err != nil {
		return err
	}
	pid := b.api.cmd.Process.Pid
	rssBefore := procRSS(pid)
	ss, err := openStreams(ctx, b.api.addr, n)
	defer ss.close()
	if err != nil {
		return err
	}
	rss := procRSS(pid)

	// Changes a little over a second apart (the stream sends at most one event a second):
	// each is timed from just before the admin's write to each stream's event showing it.
	var lat []time.Duration
	stock := int64(1000)
	for c := range changes {
		sleepCtx(ctx, 1200*time.Millisecond)
		stock++
		sent := time.Now()
		ss.expect(stock, sent)
		if err := b.admin2xx(ctx, "POST", "/api/admin/items/"+probeItem+"/stock", map[string]any{"delta": 1}); err != nil {
			return err
		}
		got, err := ss.wait(ctx, 10*time.Second)
		if err != nil {
			return fmt.Errorf("bench: stream change %d: %w", c, err)
		}
		lat = append(lat, got...)
	}
	slices.Sort(lat)
	res := result{n: int64(len(lat)), lat: lat, p50: lat[len(lat)*50/100], p99: lat[min(len(lat)-1, len(lat)*99/100)], elapsed: time.Second}
	b.rows = append(b.rows, row{name: streamRowName, res: &res, noRate: true, wantP99: time.Second,
		note: fmt.Sprintf("%d streams on one api, %d changes, %d arrivals timed from the admin's write; %d streams dropped or ended",
			n, changes, len(lat), ss.ended.Load())})
	b.rows = append(b.rows, row{name: streamRSSName,
		text:       fmt.Sprintf("%.0f MB with %d streams (%.0f MB before them)", float64(rss)/(1<<20), n, float64(rssBefore)/(1<<20)),
		targetText: fmt.Sprintf("< 300 MB %s", mark(rss < 300<<20))})

	// CPU: the api's CPU time per wall second with the streams open and one change a second,
	// then with the streams closed and the same number of shoppers polling once a second.
	progress(b.out, "catalogue stream: api CPU while %d shoppers stream (one change a second)", n)
	streamCPU, delivered, err := b.cpuPerSecond(ctx, pid, cpuWindow, func(ctx context.Context) {
		for ctx.Err() == nil {
			_ = b.admin2xx(ctx, "POST", "/api/admin/items/"+probeItem+"/stock", map[string]any{"delta": 1})
			sleepCtx(ctx, time.Second)
		}
	}, &ss.delivered)
	if err != nil {
		return err
	}
	ss.close()
	progress(b.out, "catalogue stream: api CPU while %d shoppers poll GET /api/items once a second", n)
	var polls atomic.Int64
	pollCPU, rate, err := b.cpuPerSecond(ctx, pid, cpuWindow, func(ctx context.Context) {
		pollEverySecond(ctx, b.api.addr, n, &polls)
	}, &polls)
	if err != nil {
		return err
	}
	perEvent := streamCPU / max(delivered, 1)
	perPoll := pollCPU / max(rate, 1)
	b.rows = append(b.rows, row{name: streamCPUName,
		text: fmt.Sprintf("streaming: %.0f ms CPU/s, %.1f µs per event delivered (%s events/s)",
			streamCPU*1000, perEvent*1e6, thousands(delivered)),
		baseText: fmt.Sprintf("polling: %.0f ms CPU/s at %s GET/s answered, %.1f µs per GET (%.0f ms CPU/s at %s GET/s)",
			pollCPU*1000, thousands(rate), perPoll*1e6, perPoll*float64(n)*1000, thousands(float64(n))),
		ratioText: fmt.Sprintf("**%.2f×** per delivery; %.2f× per second as measured", perEvent/perPoll, streamCPU/pollCPU),
		note: fmt.Sprintf("%d shoppers each way; streaming with one stock change a second (every stream gets the whole catalogue each second, as a poll would); "+
			"polling GET /api/items from %d keep-alive connections, each once a second (when the machine cannot send them all, the per-GET cost is the fair figure)",
			n, n)})
	return nil
}

// cpuPerSecond runs work for warm-up plus window and returns the api's CPU seconds per wall
// second over the window.
func (b *bench) cpuPerSecond(ctx context.Context, pid int, window time.Duration, work func(context.Context), count *atomic.Int64) (float64, float64, error) {
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); work(wctx) }()
	sleepCtx(ctx, 2*time.Second)
	n0, cpu0, t0 := count.Load(), procCPU(pid), time.Now()
	sleepCtx(ctx, window)
	cpu, el, n := procCPU(pid)-cpu0, time.Since(t0), count.Load()-n0
	stop()
	<-done
	if ctx.Err() != nil {
		return 0, 0, ctx.Err()
	}
	return cpu.Seconds() / el.Seconds(), float64(n) / el.Seconds(), nil
}

// procRSS is a process's resident memory in bytes (0 when unknown).
func procRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// streamSet is n open streams; each reader notes when it first sees the probe at the expected
// stock.
type streamSet struct {
	conns []net.Conn
	wg    sync.WaitGroup
	ended atomic.Int64

	mu      sync.Mutex
	want    int64
	sent    time.Time
	arrived []time.Duration
	pending int
	seen    []int64 // per stream: the last probe stock it saw
	// delivered counts items events received on every stream.
	delivered atomic.Int64
	first     sync.WaitGroup
	change    chan struct{}
}

func openStreams(ctx context.Context, addr string, n int) (*streamSet, error) {
	s := &streamSet{seen: make([]int64, n), change: make(chan struct{}, 1)}
	req := []byte("GET /api/items/stream HTTP/1.1\r\nHost: " + addr + "\r\nAccept: text/event-stream\r\n\r\n")
	s.first.Add(n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			for range n - i {
				s.first.Done()
			}
			return s, fmt.Errorf("bench: open stream %d: %w", i, err)
		}
		if _, err := c.Write(req); err != nil {
			return s, err
		}
		s.conns = append(s.conns, c)
		s.wg.Add(1)
		go s.read(i, c)
	}
	done := make(chan struct{})
	go func() { s.first.Wait(); close(done) }()
	select {
	case <-done:
		return s, nil
	case <-time.After(60 * time.Second):
		return s, fmt.Errorf("bench: streams did not all get their first event within 60 s")
	case <-ctx.Done():
		return s, ctx.Err()
	}
}

var probeMarker = []byte(`"id":"` + probeItem + `"`)

func (s *streamSet) read(i int, c net.Conn) {
	defer s.wg.Done()
	r := bufio.NewReaderSize(c, 8<<10)
	firstSeen := false
	defer func() {
		if !firstSeen {
			s.first.Done()
		}
		s.ended.Add(1)
	}()
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A long data line: keep the head (the probe is found by reading on).
			rest, err2 := r.ReadBytes('\n')
			line, err = append(slices.Clone(line), rest...), err2
		}
		if err != nil {
			return
		}
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		at := time.Now()
		s.delivered.Add(1)
		stock := probeStock(line)
		if !firstSeen {
			firstSeen = true
			s.first.Done()
		}
		s.mu.Lock()
		if stock > s.seen[i] {
			s.seen[i] = stock
			if stock == s.want && s.pending > 0 {
				s.arrived = append(s.arrived, at.Sub(s.sent))
				s.pending--
				if s.pending == 0 {
					select {
					case s.change <- struct{}{}:
					default:
					}
				}
			}
		}
		s.mu.Unlock()
	}
}

// probeStock finds the probe item's stock_left in an items event's data line (-1: absent).
func probeStock(line []byte) int64 {
	i := bytes.Index(line, probeMarker)
	if i < 0 {
		return -1
	}
	rest := line[i:]
	j := bytes.Index(rest, []byte(`"stock_left":`))
	if j < 0 {
		return -1
	}
	rest = rest[j+len(`"stock_left":`):]
	k := bytes.IndexAny(rest, ",}")
	if k < 0 {
		return -1
	}
	v, _ := strconv.ParseInt(string(rest[:k]), 10, 64)
	return v
}

// expect starts timing the change to stock.
func (s *streamSet) expect(stock int64, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want, s.sent, s.arrived = stock, sent, nil
	s.pending = len(s.conns) - int(s.ended.Load())
}

// wait returns each stream's arrival time of the expected change.
func (s *streamSet) wait(ctx context.Context, limit time.Duration) ([]time.Duration, error) {
	select {
	case <-s.change:
	case <-time.After(limit):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending > 0 {
		return nil, fmt.Errorf("%d of %d streams did not see it within %s", s.pending, len(s.conns), limit)
	}
	return slices.Clone(s.arrived), nil
}

func (s *streamSet) close() {
	if s == nil {
		return
	}
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.wg.Wait()
}

// pollEverySecond has n shoppers, each on its own keep-alive connection, GET /api/items once
// a second (spread evenly over the second) until ctx ends; answered counts the replies.
func pollEverySecond(ctx context.Context, addr string, n int, answered *atomic.Int64) {
	req := []byte("GET /api/items HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			go func() { <-ctx.Done(); c.Close() }()
			r := bufio.NewReaderSize(c, 8<<10)
			next := time.Now().Add(time.Duration(rand.Int64N(int64(time.Second))))
			for ctx.Err() == nil {
				sleepCtx(ctx, time.Until(next))
				next = next.Add(time.Second)
				if _, err := c.Write(req); err != nil {
					return
				}
				if err := skipReply(r); err != nil {
					return
				}
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
}

// skipReply reads one HTTP/1.1 reply, its body sized by Content-Length or chunked.
func skipReply(r *bufio.Reader) error {
	length, chunked := -1, false
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		lower := bytes.ToLower(line)
		if v, ok := bytes.CutPrefix(lower, []byte("content-length:")); ok {
			length, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
		if v, ok := bytes.CutPrefix(lower, []byte("transfer-encoding:")); ok {
			chunked = bytes.Contains(v, []byte("chunked"))
		}
	}
	if !chunked {
		if length < 0 {
			return fmt.Errorf("bench: reply without a length")
		}
		_, err := r.Discard(length)
		return err
	}
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil {
			return fmt.Errorf("bench: bad chunk size %q", line)
		}
		if _, err := r.Discard(int(size) + 2); err != nil { // the chunk and its CRLF
			return err
		}
		if size == 0 {
			return nil
		}
	}
}

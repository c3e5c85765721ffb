package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator speaks HTTP/1.1 over plain keep-alive connections with pre-built
// requests: it shares two cores with the servers it measures, so every microsecond it spends
// is taken from them. net/http's client costs several times more per request; wrk is not
// always installed. Every row of the table, baseline or real, uses this same generator.

// load describes one closed-loop run: conns connections, each sending the next request as
// soon as the previous answer arrived, for dur after a warm-up.
type load struct {
	addr   string
	reqs   [][]byte // requests taken round-robin across all connections
	conns  int
	warmup time.Duration
	dur    time.Duration
	// pid, when set, is the server's process: its CPU time over the measured window is taken.
	pid int
	// adm, when set, is the server's pprof listener for -profile (default: the main api's).
	adm string
	// redis, when set, samples the Redis server (CPU time, commandstats) over the measured window.
	redis func() redisSample
	// onReply, when set, sees every reply (index of the request, status, body, send time).
	onReply func(i int, status int, body []byte, sent time.Time)
	// pace, when set, caps the requests per second over all connections (the latency row's
	// 75% of peak); 0: closed loop.
	pace float64
	// warmAll extends the warm-up until every request has been answered once (each shopper's
	// token verified once), however slow the machine is that moment.
	warmAll bool
}

// warmAllLimit bounds warmAll's wait.
const warmAllLimit = 60 * time.Second

// pacer hands out send times pace apart across connections. A connection busy with its last
// reply when its slot came may still take the slot late (so the rate holds), but not a slot
// more than paceSlack in the past: no long catch-up burst after a stall.
type pacer struct {
	next  atomic.Int64 // unix ns of the next free slot
	every int64        // ns between sends
}

const paceSlack = 50 * time.Millisecond

func (p *pacer) wait() {
	if p == nil {
		return
	}
	for {
		now := time.Now().UnixNano()
		n := p.next.Load()
		at := max(n, now-int64(paceSlack))
		if p.next.CompareAndSwap(n, at+p.every) {
			if d := time.Duration(at - now); d > 0 {
				time.Sleep(d)
			}
			return
		}
	}
}

// result is what one run measured.
type result struct {
	n        int64
	elapsed  time.Duration
	p50, p99 time.Duration
	lat      []time.Duration // every measured latency, sorted (merge pools turns)
	cpu      time.Duration   // the server process's CPU time (user+system) while measured
	redis    redisSample     // the Redis server's CPU time and commands while measured (zero: not taken)
	statuses map[int]int64
}

func (r result) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.n) / r.elapsed.Seconds()
}

// run drives the load and returns rates and latency percentiles over the measured window.
func (l load) run(ctx context.Context) (result, error) {
	var (
		next     atomic.Int64
		measure  atomic.Bool
		stop     atomic.Bool
		mu       sync.Mutex
		lat      []time.Duration
		statuses = map[int]int64{}
		firstErr error
		wg       sync.WaitGroup
		pace     *pacer
	)
	if l.pace > 0 {
		pace = &pacer{every: int64(float64(time.Second) / l.pace)}
	}
	for w := 0; w < l.conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine, st, err := l.worker(ctx, &next, &measure, &stop, pace)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			for k, v := range st {
				statuses[k] += v
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}()
	}
	sleepCtx(ctx, l.warmup)
	if l.warmAll {
		// next counts requests sent; once it passes every request and a round of the
		// connections, each request has been answered at least once.
		for end := time.Now().Add(warmAllLimit); next.Load() < int64(len(l.reqs)+l.conns) && time.Now().Before(end) && ctx.Err() == nil; {
			sleepCtx(ctx, 10*time.Millisecond)
		}
	}
	cpu0, redis0 := procCPU(l.pid), l.sampleRedis()
	measure.Store(true)
	start := time.Now()
	sleepCtx(ctx, l.dur)
	measure.Store(false)
	elapsed := time.Since(start)
	cpu, redisUsed := procCPU(l.pid)-cpu0, l.sampleRedis().minus(redis0)
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return result{}, firstErr
	}
	if len(lat) == 0 {
		return result{}, fmt.Errorf("bench: no replies from %s", l.addr)
	}
	slices.Sort(lat)
	return result{
		n: int64(len(lat)), elapsed: elapsed, statuses: statuses, lat: lat, cpu: cpu, redis: redisUsed,
		p50: lat[len(lat)*50/100], p99: lat[min(len(lat)-1, len(lat)*99/100)],
	}, nil
}

// cpuPerOp is the server's CPU time per measured request (0 when not taken).
func (r result) cpuPerOp() time.Duration {
	if r.n == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.n)
}

// redisPerOp is the Redis server's CPU time per measured request (0 when not taken).
func (r result) redisPerOp() time.Duration {
	if r.n == 0 {
		return 0
	}
	return r.redis.cpu / time.Duration(r.n)
}

// replicaPerOp is the Redis replicas' CPU time per request (zero: not sampled).
func (r result) replicaPerOp() time.Duration {
	if r.n == 0 {
		return 0
	}
	return r.redis.replicaCPU / time.Duration(r.n)
}

func (l load) sampleRedis() redisSample {
	if l.redis == nil {
		return redisSample{}
	}
	return l.redis()
}

// procCPU is a process's user+system CPU time from /proc (0 when unknown): the servers'
// cost per request, which a shared machine's load changes much less than their rates.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (l load) worker(ctx context.Context, next *atomic.Int64, measure, stop *atomic.Bool, pace *pacer) ([]time.Duration, map[int]int64, error) {
	conn, err := net.Dial("tcp", l.addr)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	br := bufio.NewReaderSize(conn, 64<<10)
	lat := make([]time.Duration, 0, 4096)
	statuses := map[int]int64{}
	var body []byte
	for !stop.Load() && ctx.Err() == nil {
		pace.wait()
		i := int(next.Add(1) % int64(len(l.reqs)))
		sent := time.Now()
		if _, err := conn.Write(l.reqs[i]); err != nil {
			return nil, nil, err
		}
		status, b, err := readResponse(br, body[:0])
		if err != nil {
			return nil, nil, fmt.Errorf("bench: reading a reply from %s: %w", l.addr, err)
		}
		body = b
		if measure.Load() {
			lat = append(lat, time.Since(sent))
			statuses[status]++
		}
		if l.onReply != nil {
			l.onReply(i, status, b, sent)
		}
	}
	return lat, statuses, nil
}

var errBadResponse = errors.New("malformed HTTP response")

// readResponse reads one HTTP/1.1 response (Content-Length or chunked body) into buf.
func readResponse(br *bufio.Reader, buf []byte) (int, []byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, buf, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, buf, errBadResponse
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, buf, errBadResponse
	}
	length, chunked := -1, false
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return 0, buf, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "content-length"):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, buf, errBadResponse
			}
		case asciiEqualFold(name, "transfer-encoding"):
			chunked = asciiEqualFold(value, "chunked")
		}
	}
	switch {
	case chunked:
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return 0, buf, err
			}
			size, err := strconv.ParseInt(string(bytes.TrimRight(line, "\r\n")), 16, 64)
			if err != nil {
				return 0, buf, errBadResponse
			}
			if size == 0 {
				_, err = br.Discard(2)
				return status, buf, err
			}
			buf, err = readN(br, buf, int(size))
			if err != nil {
				return 0, buf, err
			}
			if _, err := br.Discard(2); err != nil {
				return 0, buf, err
			}
		}
	case length >= 0:
		buf, err = readN(br, buf, length)
		return status, buf, err
	}
	return 0, buf, fmt.Errorf("%w: no length", errBadResponse)
}

func readN(br *bufio.Reader, buf []byte, n int) ([]byte, error) {
	start := len(buf)
	buf = slices.Grow(buf, n)[:start+n]
	_, err := io.ReadFull(br, buf[start:])
	return buf, err
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// request builds the bytes of one HTTP/1.1 request.
func request(method, host, path string, headers map[string]string, body string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, host)
	for k, v := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	if body != "" || method == "POST" || method == "PUT" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.Bytes()
}

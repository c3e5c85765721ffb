package httpapi

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// GET /api/items/stream: the catalogue as Server-Sent Events. One goroutine (streamHub.Run)
// frames each changed encoded catalogue once and hands the same bytes to every subscriber's
// bounded queue. A subscriber whose queue is full (it stopped reading) is dropped, never buffered
// without bound; its EventSource reconnects and starts again from the current catalogue.

// StreamOptions tune the catalogue stream. Heartbeat, PerClient and Max are settings, used as
// given (config states their defaults); the other zero values take the defaults below.
type StreamOptions struct {
	MinGap    time.Duration // at most one items event per MinGap (1 s)
	Heartbeat time.Duration // a comment line at least this often
	Check     time.Duration // how often the hub looks at the snapshot (100 ms)
	Queue     int           // events a subscriber may lag behind before it is dropped (4)
	WriteWait time.Duration // longest a single write to one stream may block (10 s)
	PerClient int           // streams one client address may hold; one more is 429
	Max       int           // streams in all; one more is 503
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.MinGap <= 0 {
		o.MinGap = time.Second
	}
	if o.Check <= 0 {
		o.Check = 100 * time.Millisecond
	}
	if o.Queue <= 0 {
		o.Queue = 4
	}
	if o.WriteWait <= 0 {
		o.WriteWait = 10 * time.Second
	}
	return o
}

// frame is one encoded SSE message, shared by every subscriber it is sent to.
type frame struct{ b []byte }

var heartbeatFrame = &frame{b: []byte(":\n\n")}

type subscriber struct {
	queue chan *frame
	gone  chan struct{} // closed when the hub drops the subscriber or shuts down
}

type streamHub struct {
	opt StreamOptions

	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	latest  *frame // the newest items event (a new subscriber's first)
	list    []byte // the catalogue latest was framed from
	seq     uint64 // and its encoding's number (encodedCatalogue.seq): an older one never replaces it
	closed  bool
	dropped int64 // subscribers dropped for falling behind (tests, logs)

	// Admitted streams, in all and by client address: a place is taken before a stream starts
	// and given back when its handler returns (at once when its client goes: openStream).
	open    int
	clients map[string]int

	// beforeJoin, set only by tests, runs in a stream's handler after it read the catalogue
	// for its first event and before it joins the hub.
	beforeJoin func()
}

func newStreamHub(opt StreamOptions) *streamHub {
	return &streamHub{opt: opt.withDefaults(), subs: map[*subscriber]struct{}{}, clients: map[string]int{}}
}

var (
	errStreamsPerClient = &apiError{http.StatusTooManyRequests, "rate_limited", "too many catalogue streams from this client address; close one, or retry later"}
	errStreamsFull      = &apiError{http.StatusServiceUnavailable, "unavailable", "the api holds as many catalogue streams as it may; nothing was changed, retry later (GET /api/items answers meanwhile)"}
)

// streamRetryAfter is the Retry-After of a refused stream, in seconds.
const streamRetryAfter = "5"

// admit takes a place for a stream of client, or says which cap refuses it.
func (h *streamHub) admit(client string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.clients[client] >= h.opt.PerClient {
		return errStreamsPerClient
	}
	if h.open >= h.opt.Max {
		return errStreamsFull
	}
	h.open++
	h.clients[client]++
	return nil
}

// release gives back the place admit took.
func (h *streamHub) release(client string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open--
	if h.clients[client]--; h.clients[client] <= 0 {
		delete(h.clients, client)
	}
}

func itemsFrame(list []byte) *frame {
	b := make([]byte, 0, len(list)+len("event: items\ndata: \n\n"))
	b = append(b, "event: items\ndata: "...)
	b = append(b, list...) // compact JSON: no newline inside
	b = append(b, "\n\n"...)
	return &frame{b: b}
}

// observe frames list (the encoding numbered seq) when it differs from the newest frame and
// returns that frame (and whether it is new). An encoding older than the newest frame's (a
// handler or the hub read the catalogue before another read a newer one) changes nothing:
// the stream never goes back to an earlier catalogue.
func (h *streamHub) observe(list []byte, seq uint64) (*frame, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.observeLocked(list, seq)
}

func (h *streamHub) observeLocked(list []byte, seq uint64) (*frame, bool) {
	if h.latest != nil && seq < h.seq {
		return h.latest, false
	}
	h.seq = seq
	// The same cached encoding (the usual case: nothing changed) is the same slice; only a
	// re-encoding needs the byte compare (a 10,000-item catalogue is ~2 MB).
	if h.latest != nil && (sameSlice(h.list, list) || bytes.Equal(h.list, list)) {
		return h.latest, false
	}
	h.latest, h.list = itemsFrame(list), list
	return h.latest, true
}

// sameSlice reports whether a and b are the very same bytes in memory.
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// join registers a stream that read the catalogue list (the encoding numbered seq) and
// returns its first event: the newest frame, taken in the same step as the registration, so
// every later frame is broadcast to it and no earlier one is missed. ok is false after Close.
func (h *streamHub) join(list []byte, seq uint64) (sub *subscriber, first *frame, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, false
	}
	first, _ = h.observeLocked(list, seq)
	return h.addLocked(), first, true
}

func (h *streamHub) addLocked() *subscriber {
	sub := &subscriber{queue: make(chan *frame, h.opt.Queue), gone: make(chan struct{})}
	h.subs[sub] = struct{}{}
	return sub
}

func (h *streamHub) unsubscribe(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[sub]; ok {
		delete(h.subs, sub)
		close(sub.gone)
	}
}

// broadcast hands f to every subscriber without waiting; one with a full queue is dropped.
func (h *streamHub) broadcast(f *frame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.broadcastLocked(f)
}

func (h *streamHub) broadcastLocked(f *frame) {
	for sub := range h.subs {
		select {
		case sub.queue <- f:
		default:
			delete(h.subs, sub)
			close(sub.gone)
			h.dropped++
		}
	}
}

// sendLatest broadcasts the newest frame unless it is sent already, and returns the frame
// sent last. The newest frame is read in the same step as the fan-out: a stream that joined
// with a newer frame than the hub observed is never sent the older one after it.
func (h *streamHub) sendLatest(sent *frame) *frame {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.latest == nil || h.latest == sent {
		return sent
	}
	h.broadcastLocked(h.latest)
	return h.latest
}

// Close ends every stream and refuses new ones (the server is shutting down).
func (h *streamHub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for sub := range h.subs {
		delete(h.subs, sub)
		close(sub.gone)
	}
}

func (h *streamHub) counts() (subscribers int, dropped int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs), h.dropped
}

// run watches the encoded catalogue (current: the list and its encoding's number) while
// streams are open, until ctx ends: a changed catalogue is sent at most once per MinGap (the
// newest one when several came in between), a heartbeat comment before Heartbeat passes with
// nothing sent. It closes the hub when it returns.
func (h *streamHub) run(ctx context.Context, current func(ctx context.Context) (list []byte, seq uint64, err error)) {
	defer h.Close()
	t := time.NewTicker(h.opt.Check)
	defer t.Stop()
	var sent *frame
	var lastSent time.Time
	lastWrite := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if n, _ := h.counts(); n == 0 {
			// Nobody to send to: nothing to encode (a stream that joins starts with the
			// current catalogue itself).
			lastWrite = now
			continue
		}
		if list, seq, err := current(ctx); err == nil {
			h.observe(list, seq)
			if now.Sub(lastSent) >= h.opt.MinGap {
				if f := h.sendLatest(sent); f != sent {
					sent, lastSent, lastWrite = f, now, now
					continue
				}
			}
		}
		// On the last check before the deadline, not the first after it: waiting for that one
		// would leave up to one Check more than Heartbeat between two lines.
		if now.Sub(lastWrite)+h.opt.Check >= h.opt.Heartbeat {
			h.broadcast(heartbeatFrame)
			lastWrite = now
		}
	}
}

// RunStreams feeds the catalogue streams until ctx ends, then ends them. The app runs it
// beside the server and also calls CloseStreams when the server shuts down.
func (s *Server) RunStreams(ctx context.Context) {
	s.stream.run(ctx, func(ctx context.Context) ([]byte, uint64, error) {
		e, err := s.catalogue.get(ctx, s.Inventory)
		if err != nil {
			return nil, 0, err
		}
		return e.list, e.seq, nil
	})
}

// CloseStreams ends every catalogue stream: http.Server.Shutdown waits for handlers, and a
// stream's handler only returns when told to.
func (s *Server) CloseStreams() { s.stream.Close() }

// StreamCounts reports the open catalogue streams and how many were dropped for lagging.
func (s *Server) StreamCounts() (open int, dropped int64) { return s.stream.counts() }

var (
	eventStreamType = []string{"text/event-stream"}
	noCacheValue    = []string{"no-cache"}
	noBufferValue   = []string{"no"}
	retryFrame      = []byte("retry: 3000\n\n") // EventSource waits 3 s before reconnecting
)

func (s *Server) streamItems(c *gin.Context) {
	// Every stream holds a connection (a file descriptor) for as long as it lasts: the caps
	// keep streams from starving the purchases, /healthz and everything else.
	client := c.ClientIP()
	if err := s.stream.admit(client); err != nil {
		c.Header("Retry-After", streamRetryAfter)
		fail(c, err)
		return
	}
	defer s.stream.release(client)
	e, err := s.catalogue.get(c.Request.Context(), s.Inventory)
	if err != nil {
		fail(c, err)
		return
	}
	if s.stream.beforeJoin != nil {
		s.stream.beforeJoin()
	}
	sub, first, ok := s.stream.join(e.list, e.seq)
	if !ok {
		fail(c, errShuttingDown)
		return
	}
	defer s.stream.unsubscribe(sub)

	h := c.Writer.Header()
	h["Content-Type"] = eventStreamType
	h["Cache-Control"] = noCacheValue
	h["X-Accel-Buffering"] = noBufferValue // nginx: pass events through at once
	write, end, done := s.openStream(c)
	defer end()
	if !write(retryFrame, first.b) {
		return
	}
	last := first
	for {
		select {
		case f := <-sub.queue:
			if f == last {
				continue // the event this stream started with, broadcast after it joined
			}
			if !write(f.b) {
				return
			}
			if f != heartbeatFrame {
				last = f
			}
		case <-sub.gone:
			return
		case <-done:
			return
		}
	}
}

// openStream starts the stream's answer and returns how to write to it. Over HTTP/1.1 the
// connection is hijacked (freeing what net/http keeps per request): each write has its own
// deadline (WriteWait) and a reader goroutine sees a client go at once (done). Over HTTP/2 it
// streams through the ResponseWriter and the request's context says when the client has gone.
func (s *Server) openStream(c *gin.Context) (write func(b ...[]byte) bool, end func(), done <-chan struct{}) {
	wait := s.stream.opt.WriteWait
	rc := http.NewResponseController(c.Writer)
	conn, _, err := rc.Hijack()
	if err == nil {
		_ = conn.SetReadDeadline(time.Time{})
		head := append([]byte(nil), "HTTP/1.1 200 OK\r\n"...)
		c.Writer.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
		c.Writer.Header().Set("Connection", "close")
		for k, vs := range c.Writer.Header() {
			for _, v := range vs {
				head = append(append(append(append(head, k...), ": "...), v...), "\r\n"...)
			}
		}
		head = append(head, "\r\n"...)
		pending := head // sent with the first events, in one write
		write = func(b ...[]byte) bool {
			_ = conn.SetWriteDeadline(time.Now().Add(wait))
			bufs := net.Buffers{}
			if pending != nil {
				bufs, pending = append(bufs, pending), nil
			}
			bufs = append(bufs, b...)
			_, err := bufs.WriteTo(conn)
			return err == nil
		}
		gone := make(chan struct{})
		go func() {
			// A stream's client sends nothing after its request; whatever it sends is dropped,
			// and the read ends when it closes (or end closes the connection).
			defer close(gone)
			var buf [64]byte
			for {
				if _, err := conn.Read(buf[:]); err != nil {
					return
				}
			}
		}()
		return write, func() { conn.Close() }, gone
	}
	w := c.Writer
	_ = rc.SetReadDeadline(time.Time{})
	w.WriteHeader(http.StatusOK)
	write = func(b ...[]byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(wait))
		for _, p := range b {
			if _, err := w.Write(p); err != nil {
				return false
			}
		}
		return rc.Flush() == nil
	}
	return write, func() {}, c.Request.Context().Done()
}

package queue

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
)

// Line statuses (the admission script's, plus none).
const (
	lineNone     = "none"
	lineUpcoming = "upcoming"
	lineFixing   = "fixing"
	lineLive     = "live"
	lineSoldOut  = "sold_out"
	lineEnded    = "ended"
)

// viewFresh is how old this instance's knowledge of a line may be to answer a poll from
// memory. Every instance refreshes it on each admission tick (200ms by default), so a line
// that sells out shows sold_out within a second; a view older than this (the ticker stalled,
// Redis away) sends polls to Redis instead.
const viewFresh = time.Second

// lineView is what this instance last learnt of one line. Immutable once published.
type lineView struct {
	status   string
	admitted int64 // shoppers ever admitted from the line (its head)
	waiting  int64
	live     int64
	starts   time.Time // the sale's start (zero: none), from the catalogue
	at       time.Time // when it was learnt (local clock)
	rate     float64   // measured admissions per second over the last seconds (0: unknown)
}

// line holds one item's view and the samples its admission rate is measured from.
type line struct {
	cur     atomic.Pointer[lineView]
	mu      sync.Mutex
	samples []rateSample
}

type rateSample struct {
	at       time.Time
	admitted int64
}

// rateWindow is how far back the admission rate is measured (for eta_seconds).
const rateWindow = 10 * time.Second

func (s *Store) line(item string) *line {
	if l, ok := s.lines.Load(item); ok {
		return l.(*line)
	}
	l, _ := s.lines.LoadOrStore(item, &line{})
	return l.(*line)
}

// view returns this instance's fresh view of a line, or nil.
func (s *Store) view(item string, now time.Time) *lineView {
	l, ok := s.lines.Load(item)
	if !ok {
		return nil
	}
	v := l.(*line).cur.Load()
	if v == nil || now.Sub(v.at) > viewFresh {
		return nil
	}
	return v
}

// observe publishes what an admission step (or a read) learnt of a line. The admitted count
// only grows, so an older answer arriving late never moves it back.
func (s *Store) observe(item string, v lineView) {
	l := s.line(item)
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.cur.Load(); old != nil && old.admitted > v.admitted {
		v.admitted = old.admitted
	}
	n := len(l.samples)
	if n == 0 || v.at.Sub(l.samples[n-1].at) >= 250*time.Millisecond {
		l.samples = append(l.samples, rateSample{v.at, v.admitted})
	}
	for len(l.samples) > 1 && v.at.Sub(l.samples[0].at) > rateWindow {
		l.samples = l.samples[1:]
	}
	if first := l.samples[0]; v.at.Sub(first.at) >= time.Second {
		v.rate = float64(v.admitted-first.admitted) / v.at.Sub(first.at).Seconds()
	}
	l.cur.Store(&v)
}

// statusOf is an item's line status from the catalogue (when no fresh view has it).
func statusOf(it inventory.Item, now time.Time) string {
	switch {
	case it.Queue == nil:
		return lineNone
	case it.ArchivedAt != nil: // off sale for good: its tickets read sold_out
		return lineSoldOut
	case it.StartsAt != nil && now.Before(*it.StartsAt):
		return lineUpcoming
	case it.EndsAt != nil && !now.Before(*it.EndsAt):
		return lineEnded
	case it.StockLeft <= 0 && it.Reserved <= 0:
		return lineSoldOut
	}
	return lineLive
}

// packedTicket is a ticket as the tickets hash holds it (lua/queue/ticket.lua).
type packedTicket struct {
	state     byte // w a x s
	line      int64
	pass      string
	expiresMS int64
}

func unpackTicket(s string) (packedTicket, bool) {
	f := strings.Split(s, "|")
	if len(f) != 4 || len(f[0]) != 1 {
		return packedTicket{}, false
	}
	line, err1 := strconv.ParseInt(f[1], 10, 64)
	exp, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return packedTicket{}, false
	}
	return packedTicket{state: f[0][0], line: line, pass: f[2], expiresMS: exp}, true
}

// render turns a stored ticket and what is known of its line into the contract's Ticket.
func (s *Store) render(item, user string, t packedTicket, v *lineView, now time.Time) Ticket {
	tk := Ticket{ItemID: item, UserID: user, ETASeconds: -1, PollAfterMS: -1}
	over := v.status == lineSoldOut || v.status == lineEnded
	claims := ticketClaims{item: item, user: user, state: t.state, line: t.line, seen: v.admitted}
	switch t.state {
	case 'w':
		if over {
			tk.State = StateSoldOut
			break
		}
		tk.State = StateWaiting
		s.waiting(&tk, t.line, v, now)
	case 'a':
		switch {
		case over: // a live pass with nothing left to buy (a holder ahead bought the rest)
			tk.State = StateSoldOut
		case now.UnixMilli() >= t.expiresMS:
			tk.State = StateExpired
		default:
			tk.State = StateAdmitted
			tk.Pass = s.signer.signPass(passClaims{item: item, user: user, id: t.pass, expiresMS: t.expiresMS})
			tk.PassExpiresAt = time.UnixMilli(t.expiresMS).UTC()
			tk.PollAfterMS = min(5000, max(500, t.expiresMS-now.UnixMilli()))
		}
	case 'x':
		tk.State = StateExpired
		if over {
			tk.State = StateSoldOut
		}
	default:
		tk.State = StateSpent
	}
	tk.Token = s.ticketToken(claims)
	return tk
}

// waiting fills in a waiting ticket's position, estimate and pacing. Before the start (or
// while the start numbers the shuffled group) there is no position yet.
func (s *Store) waiting(tk *Ticket, line int64, v *lineView, now time.Time) {
	if line == 0 || v.status == lineUpcoming || v.status == lineFixing {
		tk.PollAfterMS = 2000
		if v.status == lineFixing || (!v.starts.IsZero() && !now.Before(v.starts)) {
			tk.PollAfterMS = 500
		} else if !v.starts.IsZero() {
			// Until the start, plus a random spread so a crowd does not poll in one instant.
			until := v.starts.Sub(now).Milliseconds()
			tk.PollAfterMS = min(10000, max(500, until+rand.Int64N(1000)))
		}
		return
	}
	tk.Position = max(1, line-v.admitted)
	tk.PollAfterMS = 2000
	if v.rate > 0 {
		eta := int64(math.Ceil(float64(tk.Position) / v.rate))
		tk.ETASeconds = eta
		// Poll about four times over the expected wait, within 1..10 s.
		tk.PollAfterMS = min(10000, max(1000, eta*1000/4))
	}
}

// Poll answers a shopper's poll. With the ticket's token (the Queue-Ticket header) of a
// waiting ticket and a fresh view of the line, the answer comes from memory: the position is
// the token's line number minus the shoppers admitted so far (never more than the token
// showed), sold_out when the line has ended. Anything else reads the ticket from Redis.
func (s *Store) Poll(ctx context.Context, item, user, token string) (Ticket, error) {
	now := time.Now()
	if token != "" {
		if tk, ok := s.fromMemory(item, user, token, now); ok {
			s.PollsFromMemory.Add(1)
			return tk, nil
		}
	}
	if !s.cat.Known(ctx, item) {
		return Ticket{}, inventory.ErrNotFound
	}
	s.PollsFromRedis.Add(1)
	return s.Read(ctx, item, user)
}

// PollMemory is the memory half of Poll: the answer to a poll with the ticket's token when it
// needs no Redis call (ok false: it does; call Poll).
func (s *Store) PollMemory(item, user, token string) (Ticket, bool) {
	if token == "" {
		return Ticket{}, false
	}
	tk, ok := s.fromMemory(item, user, token, time.Now())
	if ok {
		s.PollsFromMemory.Add(1)
	}
	return tk, ok
}

func (s *Store) fromMemory(item, user, token string, now time.Time) (Ticket, bool) {
	v := s.view(item, now)
	if v == nil {
		return Ticket{}, false
	}
	e := s.checked.get(token)
	if e == nil {
		c, ok := s.signer.verifyTicket(token, item, user)
		if !ok {
			return Ticket{}, false
		}
		e = s.checked.put(token, c)
	}
	c := e.claims
	if c.item != item || c.user != user || c.state != 'w' {
		return Ticket{}, false
	}
	tk := Ticket{ItemID: item, UserID: user, State: StateWaiting, ETASeconds: -1, PollAfterMS: -1, Token: token}
	seen := max(v.admitted, c.seen)
	switch {
	case v.status == lineSoldOut || v.status == lineEnded:
		// Only a shopper still behind everyone admitted is told sold_out from memory: one
		// admitted since the token was signed may have bought, and a spent ticket stays
		// spent (its token says waiting; Redis says what it became).
		if (c.line == 0 && seen > 0) || (c.line > 0 && c.line <= seen) {
			return Ticket{}, false
		}
		tk.State = StateSoldOut
		return tk, true
	case c.line == 0 && v.status == lineUpcoming:
		s.waiting(&tk, 0, v, now)
		return tk, true
	case c.line > 0 && v.status == lineLive:
		if c.line <= seen {
			return Ticket{}, false // admitted since: the pass is in Redis
		}
		view := *v
		view.admitted = seen
		s.waiting(&tk, c.line, &view, now)
		if seen != c.seen {
			if r := e.next.Load(); r != nil && r.seen == seen {
				tk.Token = r.tok
			} else {
				c.seen = seen
				tk.Token = s.ticketToken(c)
				e.next.Store(&resignedTicket{seen: seen, tok: tk.Token})
			}
		}
		return tk, true
	}
	return Ticket{}, false
}

// ticketToken signs a ticket's token and remembers it as checked: the shopper's next poll
// brings it back.
func (s *Store) ticketToken(c ticketClaims) string {
	tok := s.signer.signTicket(c)
	s.checked.put(tok, c)
	return tok
}

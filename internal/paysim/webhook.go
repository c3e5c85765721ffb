package paysim

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// event is one Stripe event, its body fixed when the change was made (data.object is the
// object as it was then, as at Stripe).
type event struct {
	id, typ string
	owner   string // the key whose object it is about: only Config.APIKey's are delivered
	body    []byte
}

type eventJSON struct {
	ID              string        `json:"id"`
	Object          string        `json:"object"`
	APIVersion      string        `json:"api_version"`
	Created         int64         `json:"created"`
	Data            eventDataJSON `json:"data"`
	Livemode        bool          `json:"livemode"`
	PendingWebhooks int           `json:"pending_webhooks"`
	Request         eventReqJSON  `json:"request"`
	Type            string        `json:"type"`
}

type eventDataJSON struct {
	Object any `json:"object"`
}

type eventReqJSON struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

func (s *Server) newEvent(owner, typ string, obj any) *event {
	ev := &event{id: "evt_" + randomID(24), typ: typ, owner: owner}
	raw, err := json.Marshal(eventJSON{
		ID: ev.id, Object: "event", APIVersion: s.cfg.EventAPIVersion, Created: time.Now().Unix(),
		Data: eventDataJSON{Object: obj}, PendingWebhooks: 1, Type: typ,
	})
	if err != nil {
		panic("paysim: marshal event: " + err.Error())
	}
	ev.body = raw
	return ev
}

// Sign is the Stripe-Signature header value for body signed with secret at time t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
func Sign(body []byte, secret string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Stats counts the webhook work so far.
type Stats struct {
	Events    int64 // events made
	Attempts  int64 // delivery attempts (each copy, each retry)
	Delivered int64 // deliveries answered 2xx (copies count one each)
	Failed    int64 // attempts not answered 2xx (each is retried)
	Pending   int64 // deliveries waiting for an attempt or in one
	Evicted   int64 // finished payments (with their charges and refunds) and Idempotency-Keys dropped to stay within MaxObjects
	Objects   int64 // intents, charges, refunds and disputes kept
}

// Stats reports the webhook counters.
func (s *Server) Stats() Stats {
	d := s.hooks
	s.mu.Lock()
	objects := s.objectsLocked()
	s.mu.Unlock()
	s.idem.mu.Lock()
	idemEvicted := s.idem.evicted
	s.idem.mu.Unlock()
	return Stats{
		Events: d.events.Load(), Attempts: d.attempts.Load(), Delivered: d.delivered.Load(),
		Failed: d.failed.Load(), Pending: int64(len(d.slots)),
		Evicted: s.evicted.Load() + idemEvicted, Objects: int64(objects),
	}
}

// Idle reports whether every event made so far has been delivered (each copy answered 2xx),
// or was not to be delivered (no webhook URL). Tests wait for it before checking what the
// receiver did.
func (s *Server) Idle() bool {
	d := s.hooks
	return d.handed.Load() == d.events.Load() && len(d.slots) == 0
}

// delivery is one copy of an event on its way to the webhook URL.
type delivery struct {
	ev      *event
	attempt int // attempts made so far
	due     time.Time
}

type dueHeap []*delivery

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*delivery)) }
func (h *dueHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil // the delivered event's body can go
	*h = old[:len(old)-1]
	return d
}

// deliverer sends events to the webhook URL: at least once, each copy retried with capped
// exponential backoff until answered 2xx, by a few workers fed by one scheduler. slots bounds
// the deliveries in the queue; a producer waits for room.
type deliverer struct {
	s     *Server
	url   atomic.Pointer[string]
	slots chan struct{}
	ready chan *delivery
	wake  chan struct{}
	mu    sync.Mutex
	due   dueHeap
	wg    sync.WaitGroup

	events, attempts, delivered, failed atomic.Int64
	handed                              atomic.Int64 // events whose copies are all queued (or not to be sent)
}

func newDeliverer(s *Server) *deliverer {
	d := &deliverer{
		s:     s,
		slots: make(chan struct{}, s.cfg.QueueMax),
		ready: make(chan *delivery),
		wake:  make(chan struct{}, 1),
	}
	d.url.Store(&s.cfg.WebhookURL)
	d.wg.Add(1 + s.cfg.Workers)
	go d.schedule()
	for range s.cfg.Workers {
		go d.work()
	}
	return d
}

// enqueue hands events over for delivery, in copies as the chaos settings say; it waits for
// room in the queue, or until Close.
func (d *deliverer) enqueue(evts []*event) {
	d.events.Add(int64(len(evts)))
	if *d.url.Load() == "" {
		d.handed.Add(int64(len(evts)))
		return
	}
	ch := d.s.cfg.Chaos
	for _, ev := range evts {
		if ev.owner != d.s.cfg.APIKey {
			d.handed.Add(1) // another account's: it has no webhook here
			continue
		}
		copies := 1
		if ch.Duplicates > 1 {
			copies = 1 + rand.IntN(ch.Duplicates)
		}
		for range copies {
			select {
			case d.slots <- struct{}{}:
			case <-d.s.lifetime.Done():
				return
			}
			wait := ch.Delay
			if ch.ReorderWindow > 0 {
				wait += rand.N(ch.ReorderWindow)
			}
			d.push(&delivery{ev: ev, due: time.Now().Add(wait)})
		}
		d.handed.Add(1)
	}
}

func (d *deliverer) push(x *delivery) {
	d.mu.Lock()
	heap.Push(&d.due, x)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// schedule hands each delivery to a worker when it is due.
func (d *deliverer) schedule() {
	defer d.wg.Done()
	stop := d.s.lifetime.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		var next *delivery
		wait := time.Hour
		if len(d.due) > 0 {
			if w := time.Until(d.due[0].due); w <= 0 {
				next = heap.Pop(&d.due).(*delivery)
			} else {
				wait = w
			}
		}
		d.mu.Unlock()
		if next != nil {
			select {
			case d.ready <- next:
				continue
			case <-stop:
				return
			}
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-d.wake:
		case <-stop:
			return
		}
	}
}

func (d *deliverer) work() {
	defer d.wg.Done()
	stop := d.s.lifetime.Done()
	for {
		select {
		case x := <-d.ready:
			if d.attempt(x) {
				d.delivered.Add(1)
				<-d.slots
				continue
			}
			d.failed.Add(1)
			d.push(&delivery{ev: x.ev, attempt: x.attempt, due: time.Now().Add(d.backoff(x.attempt))})
		case <-stop:
			return
		}
	}
}

// backoff after n failed attempts: RetryMin doubled each time, capped at RetryMax, with the
// upper half jittered so that retries of a burst spread out.
func (d *deliverer) backoff(n int) time.Duration {
	b := d.s.cfg.RetryMin
	for i := 1; i < n && b < d.s.cfg.RetryMax; i++ {
		b *= 2
	}
	b = min(b, d.s.cfg.RetryMax)
	return b/2 + rand.N(b/2+1)
}

// attempt POSTs the event once, signed now (each attempt is signed afresh, so its t= is
// recent however late the retry); true if answered 2xx.
func (d *deliverer) attempt(x *delivery) bool {
	x.attempt++
	d.attempts.Add(1)
	ctx, cancel := context.WithTimeout(d.s.lifetime, d.s.cfg.WebhookTimeout)
	defer cancel()
	url := *d.url.Load()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(x.ev.body))
	if err != nil {
		d.s.log.Error("paysim: webhook request", "url", url, "err", err)
		return false
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Stripe-Signature", Sign(x.ev.body, d.s.secrets[0], time.Now()))
	res, err := d.s.cfg.HTTPClient.Do(req)
	if err != nil {
		if d.s.lifetime.Err() == nil {
			d.s.log.Warn("paysim: webhook not delivered, will retry", "event", x.ev.id, "type", x.ev.typ, "attempt", x.attempt, "err", err)
		}
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10)) // so the connection is reused
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		d.s.log.Warn("paysim: webhook refused, will retry", "event", x.ev.id, "type", x.ev.typ, "attempt", x.attempt, "status", res.StatusCode)
		return false
	}
	return true
}

// close waits for the scheduler and the workers (the lifetime context is already cancelled,
// which also aborts attempts in flight).
func (d *deliverer) close() { d.wg.Wait() }

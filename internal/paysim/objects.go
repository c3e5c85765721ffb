package paysim

import (
	"container/list"
	"net/http"
	"strconv"
	"strings"
)

// The simulator's memory is bounded by Config.MaxObjects: payment intents, charges, refunds
// and disputes together. Creating past the bound evicts the oldest finished payment (succeeded
// or cancelled, nothing scheduled for it) with its charges, refunds and dispute; when every
// payment kept is still open, creation is refused with Stripe's 429 rather than growing.

// objectsLocked is how many objects are kept (s.mu held).
func (s *Server) objectsLocked() int {
	return len(s.intents) + len(s.charges) + len(s.refunds) + s.disputes + len(s.sessions)
}

// roomLocked makes room for n more objects, never evicting keep (s.mu held); a 429 when no
// finished payment is left to evict.
func (s *Server) roomLocked(n int, keep *intent) *apiError {
	for s.objectsLocked()+n > s.cfg.MaxObjects {
		var victim *intent
		for el := s.order.Front(); el != nil; el = el.Next() {
			if pi := el.Value.(*intent); pi != keep && s.finishedLocked(pi) {
				victim = pi
				break
			}
		}
		if victim == nil && s.evictSessionLocked() {
			continue
		}
		if victim == nil {
			return &apiError{status: http.StatusTooManyRequests, Type: invalidRequest, Code: "rate_limit",
				Message: "Too many objects are open at once on this simulator (FLASHSALE_PAYMENT_SIM_MAX_OBJECTS); finish or cancel some, or try again later."}
		}
		s.evictLocked(victim)
	}
	return nil
}

// finishedLocked: the payment can change no more by itself (a refund or a dispute may still
// come, but nothing is scheduled for it).
func (s *Server) finishedLocked(pi *intent) bool {
	if pi.status != StatusSucceeded && pi.status != StatusCanceled {
		return false
	}
	for _, id := range pi.charges {
		if s.timers["dispute:"+id] != nil {
			return false
		}
	}
	return true
}

func (s *Server) addIntentLocked(pi *intent) {
	s.seq++
	pi.seq = s.seq
	s.intents[pi.id] = pi
	pi.elem = s.order.PushBack(pi)
	l := s.byOwner[pi.owner]
	if l == nil {
		l = list.New()
		s.byOwner[pi.owner] = l
	}
	pi.ownerElem = l.PushBack(pi)
}

func (s *Server) evictLocked(pi *intent) {
	for _, id := range pi.charges {
		if ch := s.charges[id]; ch != nil && ch.dispute != nil {
			s.disputes--
		}
		delete(s.charges, id)
	}
	for _, id := range pi.refunds {
		delete(s.refunds, id)
	}
	delete(s.intents, pi.id)
	s.order.Remove(pi.elem)
	if l := s.byOwner[pi.owner]; l != nil {
		l.Remove(pi.ownerElem)
		if l.Len() == 0 {
			delete(s.byOwner, pi.owner)
		}
	}
	s.evicted.Add(1)
}

// createdRange is Stripe's created[gt|gte|lt|lte] filter of a listing.
type createdRange struct{ gte, lte int64 }

func createdParam(c *caller) (createdRange, *apiError) {
	r := createdRange{gte: 0, lte: 1<<63 - 1}
	for _, op := range []string{"gt", "gte", "lt", "lte"} {
		name := "created[" + op + "]"
		v := c.get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return r, badRequest("parameter_invalid_integer", name, "Invalid integer: %s", v)
		}
		switch op {
		case "gt":
			r.gte = max(r.gte, n+1)
		case "gte":
			r.gte = max(r.gte, n)
		case "lt":
			r.lte = min(r.lte, n-1)
		case "lte":
			r.lte = min(r.lte, n)
		}
	}
	if v := c.get("created"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return r, badRequest("parameter_invalid_integer", "created", "Invalid integer: %s", v)
		}
		r.gte, r.lte = max(r.gte, n), min(r.lte, n)
	}
	return r, nil
}

// listIntents is GET /v1/payment_intents: the caller's payment intents, newest first, with
// Stripe's created filter, limit / starting_after pagination and expand[]=data.latest_charge. A page costs its length, not
// the number of payments kept.
func (s *Server) listIntents(_ *http.Request, c *caller) (int, any) {
	if e := c.only("created", "created[", "limit", "starting_after", "expand["); e != nil {
		return fail(e)
	}
	limit, e := limitParam(c)
	if e != nil {
		return fail(e)
	}
	span, e := createdParam(c)
	if e != nil {
		return fail(e)
	}
	after := c.get("starting_after")
	expandCharge := false
	for name, vals := range c.form {
		if strings.HasPrefix(name, "expand[") && len(vals) > 0 && vals[0] == "data.latest_charge" {
			expandCharge = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var el *list.Element
	if after != "" {
		pi := s.intents[after]
		if pi == nil || pi.owner != c.key {
			return fail(noSuchParam("payment_intent", "starting_after", after))
		}
		el = pi.ownerElem.Prev()
	} else if l := s.byOwner[c.key]; l != nil {
		el = l.Back()
	}
	data := []*intentJSON{}
	out := listJSON{Object: "list", URL: "/v1/payment_intents"}
	for ; el != nil; el = el.Prev() {
		pi := el.Value.(*intent)
		if pi.created > span.lte {
			continue
		}
		if pi.created < span.gte {
			break // older ones follow: creation order is time order
		}
		if len(data) == limit {
			out.HasMore = true
			break
		}
		v := pi.view()
		if ch := s.charges[pi.latestCharge]; expandCharge && ch != nil {
			v.LatestCharge = ch.view()
		}
		data = append(data, v)
	}
	out.Data = data
	return http.StatusOK, out
}

// evictSessionLocked evicts the oldest Checkout Session that has ended (complete or expired),
// counted like an evicted payment; false when every session kept is open.
func (s *Server) evictSessionLocked() bool {
	for el := s.sessionOrder.Front(); el != nil; el = el.Next() {
		if cs := el.Value.(*session); cs.status != SessionOpen {
			s.sessionOrder.Remove(el)
			delete(s.sessions, cs.id)
			s.evicted.Add(1)
			return true
		}
	}
	return false
}

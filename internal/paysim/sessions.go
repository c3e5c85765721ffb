package paysim

import (
	"container/list"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Checkout Sessions, the subset of Stripe's that flashsale uses: one payment attempt for one line
// item, paid on its hosted page (sessionpage.go), which makes its PaymentIntent on submit. A
// decline leaves the session open for another card; an async method completes it unpaid until
// the debit settles. An open session ends at its expires_at or through .../{id}/expire.

// Session statuses and payment statuses, in Stripe's words.
const (
	SessionOpen     = "open"
	SessionComplete = "complete"
	SessionExpired  = "expired"
	SessionPaid     = "paid"
	SessionUnpaid   = "unpaid"
)

// Stripe's bounds on a session's expires_at, counted from its creation.
const (
	SessionMinLife = 30 * time.Minute
	SessionMaxLife = 24 * time.Hour
)

type session struct {
	id, key, secret, currency, name  string
	status, paymentStatus            string
	unitAmount, quantity             int64
	successURL, cancelURL, clientRef string
	metadata, intentMetadata         map[string]string
	methodTypes                      []string
	created, expiresAt               int64
	intent                           string // "" until the shopper submits the page
	seq                              int64
	elem                             *list.Element // in Server.sessionOrder
}

type sessionJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	AmountSubtotal     int64             `json:"amount_subtotal"`
	AmountTotal        int64             `json:"amount_total"`
	CancelURL          *string           `json:"cancel_url"`
	ClientReferenceID  *string           `json:"client_reference_id"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	ExpiresAt          int64             `json:"expires_at"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	Mode               string            `json:"mode"`
	PaymentIntent      *string           `json:"payment_intent"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	PaymentStatus      string            `json:"payment_status"`
	Status             string            `json:"status"`
	SuccessURL         *string           `json:"success_url"`
	UIMode             string            `json:"ui_mode"`
	URL                *string           `json:"url"`
}

type sessionListJSON struct {
	Object  string        `json:"object"`
	Data    []sessionJSON `json:"data"`
	HasMore bool          `json:"has_more"`
	URL     string        `json:"url"`
}

// view is the session as Stripe shows it; base is the simulator's own URL (the hosted page's).
func (cs *session) view(base string) sessionJSON {
	v := sessionJSON{
		ID: cs.id, Object: "checkout.session", AmountSubtotal: cs.unitAmount * cs.quantity,
		AmountTotal: cs.unitAmount * cs.quantity, CancelURL: strOrNil(cs.cancelURL),
		ClientReferenceID: strOrNil(cs.clientRef), Created: cs.created, Currency: cs.currency,
		ExpiresAt: cs.expiresAt, Metadata: cs.metadata, Mode: "payment", PaymentIntent: strOrNil(cs.intent),
		PaymentMethodTypes: cs.methodTypes, PaymentStatus: cs.paymentStatus, Status: cs.status,
		SuccessURL: strOrNil(cs.successURL), UIMode: "hosted",
	}
	if cs.status == SessionOpen && base != "" {
		v.URL = strOrNil(base + "/c/pay/" + cs.id)
	}
	return v
}

// sessionParams are the parameters POST /v1/checkout/sessions takes; any other is 400
// parameter_unknown, as at Stripe.
var sessionParams = []string{
	"mode", "success_url", "cancel_url", "client_reference_id", "expires_at", "customer_email",
	"line_items[0][quantity]", "line_items[0][price_data][currency]", "line_items[0][price_data][unit_amount]",
	"line_items[0][price_data][product_data][name]", "payment_method_types[0]", "locale",
}

// minCharge is Stripe's minimum charge per currency (in its smallest unit) for the currencies
// the simulator knows; others have no minimum here.
var minCharge = map[string]int64{"usd": 50, "eur": 50, "gbp": 30, "cad": 50, "aud": 50, "chf": 50, "jpy": 50}

// MinCharge is the smallest amount (in the currency's smallest unit) Stripe charges in the
// currency, and whether the simulator knows one.
func MinCharge(currency string) (int64, bool) {
	n, ok := minCharge[strings.ToLower(currency)]
	return n, ok
}

func knownSessionParam(name string) bool {
	if slices.Contains(sessionParams, name) {
		return true
	}
	for _, prefix := range []string{"metadata[", "payment_intent_data[metadata]["} {
		if strings.HasPrefix(name, prefix) && strings.HasSuffix(name, "]") {
			return true
		}
	}
	return false
}

// prefixedMetadata reads prefix[key]=value parameters with Stripe's metadata limits.
func prefixedMetadata(c *caller, prefix string) (map[string]string, *apiError) {
	md := map[string]string{}
	for name, vals := range c.form {
		k, ok := strings.CutPrefix(name, prefix+"[")
		if !ok {
			continue
		}
		k, ok = strings.CutSuffix(k, "]")
		if !ok || k == "" || len(k) > 40 || strings.ContainsAny(k, "[]") || len(vals) == 0 || len(vals[0]) > 500 {
			return nil, badRequest("parameter_invalid", name, "Invalid metadata parameter %s: keys are 1-40 characters, values up to 500.", name)
		}
		md[k] = vals[0]
	}
	if len(md) > 50 {
		return nil, badRequest("parameter_invalid", prefix, "Metadata may have at most 50 keys.")
	}
	return md, nil
}

func absoluteURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && len(raw) <= 5000
}

func (s *Server) createSession(r *http.Request, c *caller) (int, any) {
	for name := range c.form {
		if !knownSessionParam(name) {
			return fail(badRequest("parameter_unknown", name, "Received unknown parameter: %s", name))
		}
	}
	if m := c.get("mode"); m != "payment" {
		return fail(badRequest("parameter_invalid_string", "mode", "Invalid mode: %q (the simulator takes payment).", m))
	}
	succ, canc := c.get("success_url"), c.get("cancel_url")
	if succ == "" {
		return fail(badRequest("parameter_missing", "success_url", "Missing required param: success_url."))
	}
	for name, u := range map[string]string{"success_url": succ, "cancel_url": canc} {
		if u != "" && !absoluteURL(u) {
			return fail(badRequest("url_invalid", name, "Not a valid URL"))
		}
	}
	currency := strings.ToLower(c.get("line_items[0][price_data][currency]"))
	if len(currency) != 3 || strings.Trim(currency, "abcdefghijklmnopqrstuvwxyz") != "" {
		return fail(badRequest("parameter_invalid_string", "line_items[0][price_data][currency]", "Invalid currency: %q.", currency))
	}
	unit, e := amountParam(c, "line_items[0][price_data][unit_amount]", true)
	if e != nil {
		return fail(e)
	}
	qty, err := strconv.ParseInt(c.get("line_items[0][quantity]"), 10, 64)
	if err != nil || qty < 1 || qty > 999_999 {
		return fail(badRequest("parameter_invalid_integer", "line_items[0][quantity]", "line_items[0][quantity] must be an integer from 1 to 999999."))
	}
	if unit*qty > 99_999_999 {
		return fail(badRequest("amount_too_large", "line_items", "The Checkout Session's total amount must be no more than 99999999."))
	}
	if floor, ok := MinCharge(currency); ok && unit*qty < floor {
		return fail(badRequest("amount_too_small", "line_items",
			"The Checkout Session's total amount due must add up to at least %s.", formatAmount(floor, currency)))
	}
	name := c.get("line_items[0][price_data][product_data][name]")
	if name == "" || len(name) > 250 {
		return fail(badRequest("parameter_missing", "line_items[0][price_data][product_data][name]", "A product name of 1-250 characters is required."))
	}
	methods := []string{"card"}
	if m := c.get("payment_method_types[0]"); m != "" && m != "card" {
		return fail(badRequest("parameter_invalid_string", "payment_method_types[0]", "The simulator offers card payments only, not %q.", m))
	}
	md, e := prefixedMetadata(c, "metadata")
	if e != nil {
		return fail(e)
	}
	pmd, e := prefixedMetadata(c, "payment_intent_data[metadata]")
	if e != nil {
		return fail(e)
	}
	ref := c.get("client_reference_id")
	if len(ref) > 200 {
		return fail(badRequest("parameter_invalid_string", "client_reference_id", "client_reference_id is at most 200 characters."))
	}
	now := time.Now()
	expires := now.Add(SessionMaxLife).Unix()
	if v := c.get("expires_at"); v != "" {
		at, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fail(badRequest("parameter_invalid_integer", "expires_at", "Invalid integer: %s", v))
		}
		// Stripe's bounds, with a few seconds of slack for the caller's clock and the trip.
		if at < now.Add(SessionMinLife-10*time.Second).Unix() || at > now.Add(SessionMaxLife+10*time.Second).Unix() {
			return fail(badRequest("parameter_invalid_integer", "expires_at",
				"The `expires_at` timestamp must be between 30 minutes and 24 hours from Checkout Session creation."))
		}
		expires = at
	}
	cs := &session{
		id: "cs_test_" + randomID(40), key: c.key, secret: randomID(32), currency: currency, name: name,
		status: SessionOpen, paymentStatus: SessionUnpaid, unitAmount: unit, quantity: qty,
		successURL: succ, cancelURL: canc, clientRef: ref, metadata: md, intentMetadata: pmd,
		methodTypes: methods, created: now.Unix(), expiresAt: expires,
	}
	s.mu.Lock()
	if e := s.roomLocked(1, nil); e != nil {
		s.mu.Unlock()
		return fail(e)
	}
	s.seq++
	cs.seq = s.seq
	s.sessions[cs.id] = cs
	cs.elem = s.sessionOrder.PushBack(cs)
	if !s.closed {
		id := cs.id
		s.timers[id] = time.AfterFunc(time.Until(time.Unix(expires, 0)), func() { s.expireSession(id) })
	}
	view := cs.view(s.baseURL(r))
	s.mu.Unlock()
	if s.failAfterWrite(OpSession, cs.id) {
		return fail(errAfterWrite)
	}
	return http.StatusOK, view
}

// baseURL is the simulator's own URL as the caller reached it, for the hosted page's link.
func (s *Server) baseURL(r *http.Request) string {
	if u := s.URL(); u != "" {
		return u
	}
	return "http://" + r.Host
}

// sessionOf is the caller's session of the path (another key's is missing, as at Stripe).
func (s *Server) sessionOf(r *http.Request, c *caller) (*session, *apiError) {
	id := r.PathValue("id")
	cs := s.sessions[id]
	if cs == nil || cs.key != c.key {
		return nil, noSuch("checkout.session", "session", id)
	}
	return cs, nil
}

func (s *Server) getSession(r *http.Request, c *caller) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, e := s.sessionOf(r, c)
	if e != nil {
		return fail(e)
	}
	return http.StatusOK, cs.view(s.baseURL(r))
}

func (s *Server) expireSessionAPI(r *http.Request, c *caller) (int, any) {
	s.mu.Lock()
	cs, e := s.sessionOf(r, c)
	if e != nil {
		s.mu.Unlock()
		return fail(e)
	}
	if cs.status != SessionOpen {
		s.mu.Unlock()
		return fail(badRequest("checkout_session_unexpected_state", "",
			"Only Checkout Sessions with a status in [\"open\"] can be expired. This Checkout Session has a status of %q.", cs.status))
	}
	evts := s.expireSessionLocked(cs)
	view := cs.view(s.baseURL(r))
	s.mu.Unlock()
	s.hooks.enqueue(evts)
	return http.StatusOK, view
}

// expireSession ends an open session whose expires_at came.
func (s *Server) expireSession(id string) {
	s.mu.Lock()
	delete(s.timers, id)
	cs := s.sessions[id]
	if s.closed || cs == nil || cs.status != SessionOpen {
		s.mu.Unlock()
		return
	}
	evts := s.expireSessionLocked(cs)
	s.mu.Unlock()
	s.hooks.enqueue(evts)
}

// expireSessionLocked expires an open session and cancels its PaymentIntent (a declined one
// still waiting for a card), as Stripe does.
func (s *Server) expireSessionLocked(cs *session) []*event {
	cs.status = SessionExpired
	if t := s.timers[cs.id]; t != nil {
		t.Stop()
		delete(s.timers, cs.id)
	}
	var evts []*event
	if pi := s.intents[cs.intent]; pi != nil && pi.status == StatusRequiresPaymentMethod {
		pi.status, pi.canceledAt, pi.cancellationReason = StatusCanceled, time.Now().Unix(), "abandoned"
		evts = append(evts, s.newEvent(cs.key, "payment_intent.canceled", pi.view()))
	}
	return append(evts, s.newEvent(cs.key, "checkout.session.expired", cs.view("")))
}

// listSessions is GET /v1/checkout/sessions, newest first, filtered by status, payment_intent
// and created[gte], with Stripe's limit / starting_after pagination.
func (s *Server) listSessions(r *http.Request, c *caller) (int, any) {
	limit := 10
	if v := c.get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return fail(badRequest("parameter_invalid_integer", "limit", "limit must be an integer from 1 to 100."))
		}
		limit = n
	}
	var since int64
	if v := c.get("created[gte]"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fail(badRequest("parameter_invalid_integer", "created[gte]", "Invalid integer: %s", v))
		}
		since = n
	}
	status, piID, after := c.get("status"), c.get("payment_intent"), c.get("starting_after")
	if status != "" && status != SessionOpen && status != SessionComplete && status != SessionExpired {
		return fail(badRequest("parameter_invalid_string", "status", "Invalid status: %q.", status))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*session
	for _, cs := range s.sessions {
		if cs.key == c.key && cs.created >= since && (status == "" || cs.status == status) && (piID == "" || cs.intent == piID) {
			all = append(all, cs)
		}
	}
	slices.SortFunc(all, func(a, b *session) int { return int(b.seq - a.seq) })
	if after != "" {
		i := slices.IndexFunc(all, func(cs *session) bool { return cs.id == after })
		if i < 0 {
			return fail(noSuchParam("checkout.session", "starting_after", after))
		}
		all = all[i+1:]
	}
	out := sessionListJSON{Object: "list", Data: []sessionJSON{}, URL: "/v1/checkout/sessions"}
	base := s.baseURL(r)
	for i, cs := range all {
		if i == limit {
			out.HasMore = true
			break
		}
		out.Data = append(out.Data, cs.view(base))
	}
	return http.StatusOK, out
}

// paySessionLocked submits an open session's hosted page with payment method pm, making its
// PaymentIntent on the first submit. A decline leaves it open, a success completes it paid, an
// async method completes it unpaid (settleAsync settles it later). It answers whether the
// session is now complete (the shopper goes to success_url) and the events.
func (s *Server) paySessionLocked(cs *session, pm string) (bool, []*event) {
	if cs.status != SessionOpen {
		return false, nil
	}
	var evts []*event
	pi := s.intents[cs.intent]
	if pi == nil {
		if e := s.roomLocked(2, nil); e != nil { // the intent and its charge
			return false, nil
		}
		id := "pi_" + randomID(24)
		pi = &intent{
			owner: cs.key, id: id, secret: id + "_secret_" + randomID(25), currency: cs.currency,
			status: StatusRequiresPaymentMethod, amount: cs.unitAmount * cs.quantity, created: time.Now().Unix(),
			metadata: cs.intentMetadata, description: cs.name, session: cs.id,
		}
		s.addIntentLocked(pi)
		cs.intent = id
		evts = append(evts, s.newEvent(cs.key, "payment_intent.created", pi.view()))
	}
	_, _, more := s.confirmLocked(pi, pm)
	evts = append(evts, more...)
	switch pi.status {
	case StatusSucceeded:
		cs.status, cs.paymentStatus = SessionComplete, SessionPaid
	case StatusProcessing:
		cs.status = SessionComplete
	default:
		return false, evts
	}
	if t := s.timers[cs.id]; t != nil {
		t.Stop()
		delete(s.timers, cs.id)
	}
	return true, append(evts, s.newEvent(cs.key, "checkout.session.completed", cs.view("")))
}

// sessionSettledLocked follows a session's PaymentIntent that settled after the session
// completed unpaid (an async method): the session is paid, or its payment failed.
func (s *Server) sessionSettledLocked(pi *intent) *event {
	cs := s.sessions[pi.session]
	if cs == nil || cs.status != SessionComplete || cs.paymentStatus != SessionUnpaid {
		return nil
	}
	if pi.status == StatusSucceeded {
		cs.paymentStatus = SessionPaid
		return s.newEvent(cs.key, "checkout.session.async_payment_succeeded", cs.view(""))
	}
	return s.newEvent(cs.key, "checkout.session.async_payment_failed", cs.view(""))
}

// successURL is where a completed session sends the shopper: its success_url with Stripe's
// {CHECKOUT_SESSION_ID} template variable filled in.
func (cs *session) successTarget() string {
	return strings.ReplaceAll(cs.successURL, "{CHECKOUT_SESSION_ID}", cs.id)
}

package paysim

import (
	"container/list"
	"crypto/subtle"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Stripe's payment intent statuses that the simulator uses.
const (
	StatusRequiresPaymentMethod = "requires_payment_method"
	StatusProcessing            = "processing"
	StatusSucceeded             = "succeeded"
	StatusCanceled              = "canceled"
)

// The test payment methods (Stripe's names; pm_card_async and pm_card_async_fail are the
// simulator's own, standing for a bank debit that settles later, as Stripe's SEPA or ACH test
// accounts do).
const (
	CardVisa     = "pm_card_visa"           // succeeds at once
	CardDeclined = "pm_card_chargeDeclined" // declined: requires_payment_method, payment_failed event
	CardAsync    = "pm_card_async"          // processing, then succeeds after Config.AsyncDelay
	CardDispute  = "pm_card_createDispute"  // succeeds, then is disputed after Config.DisputeDelay
	// CardAsyncFail is processing, then fails after Config.AsyncDelay (a debit the bank
	// returns): requires_payment_method, charge.failed, payment_intent.payment_failed and, for
	// a session's payment, checkout.session.async_payment_failed.
	CardAsyncFail = "pm_card_async_fail"
)

// cardOutcome maps every accepted payment method to what confirming with it does.
var cardOutcome = map[string]string{
	CardVisa:                      StatusSucceeded,
	"pm_card_mastercard":          StatusSucceeded,
	"pm_card_amex":                StatusSucceeded,
	CardDeclined:                  StatusRequiresPaymentMethod,
	"pm_card_visa_chargeDeclined": StatusRequiresPaymentMethod,
	CardAsync:                     StatusProcessing,
	CardAsyncFail:                 StatusProcessing,
	CardDispute:                   StatusSucceeded,
}

// intent is a payment intent; owner is the secret key that made it (the only one that sees
// it, and its charges and refunds).
type intent struct {
	owner                        string
	seq                          int64
	elem, ownerElem              *list.Element // in Server.order and Server.byOwner[owner]
	charges, refunds             []string
	id, secret, currency, status string
	amount, received, created    int64
	metadata                     map[string]string
	description                  string
	paymentMethod                string
	latestCharge                 string
	lastError                    *apiError
	canceledAt                   int64
	cancellationReason           string
	session                      string // the Checkout Session that made it, if any
}

type charge struct {
	owner                                       string
	dispute                                     *dispute
	id, intent, currency, status, paymentMethod string
	amount, refunded, created                   int64
	metadata                                    map[string]string
	failureCode, failureMessage                 string
}

type refund struct {
	owner                                string
	id, charge, intent, currency, reason string
	amount, created, seq                 int64
	metadata                             map[string]string
}

// JSON shapes: the fields of Stripe's objects that a client reads, with Stripe's names.
type intentJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ClientSecret       string            `json:"client_secret"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Description        *string           `json:"description"`
	LastPaymentError   *apiError         `json:"last_payment_error"`
	LatestCharge       any               `json:"latest_charge"` // its id, or the charge when expanded
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	PaymentMethod      *string           `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`
}

type chargeJSON struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Disputed       bool              `json:"disputed"`
	FailureCode    *string           `json:"failure_code"`
	FailureMessage *string           `json:"failure_message"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentIntent  string            `json:"payment_intent"`
	PaymentMethod  string            `json:"payment_method"`
	Refunded       bool              `json:"refunded"`
	Status         string            `json:"status"`
}

type refundJSON struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        string            `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent string            `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`
}

// dispute is a charge's chargeback (pm_card_createDispute).
type dispute struct {
	id, charge, intent, currency string
	amount, created              int64
}

type disputeJSON struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Amount        int64  `json:"amount"`
	Charge        string `json:"charge"`
	Created       int64  `json:"created"`
	Currency      string `json:"currency"`
	Livemode      bool   `json:"livemode"`
	PaymentIntent string `json:"payment_intent"`
	Reason        string `json:"reason"`
	Status        string `json:"status"`
}

func (d *dispute) view() *disputeJSON {
	return &disputeJSON{ID: d.id, Object: "dispute", Amount: d.amount, Charge: d.charge, Created: d.created,
		Currency: d.currency, PaymentIntent: d.intent, Reason: "fraudulent", Status: "needs_response"}
}

type pmJSON struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Type   string `json:"type"`
}

type listJSON struct {
	Object  string `json:"object"`
	Data    any    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (pi *intent) view() *intentJSON {
	v := &intentJSON{
		ID: pi.id, Object: "payment_intent", Amount: pi.amount, AmountReceived: pi.received,
		CancellationReason: strOrNil(pi.cancellationReason), CaptureMethod: "automatic",
		ClientSecret: pi.secret, ConfirmationMethod: "automatic", Created: pi.created,
		Currency: pi.currency, Description: strOrNil(pi.description), LastPaymentError: pi.lastError,
		LatestCharge: strOrNil(pi.latestCharge), Metadata: pi.metadata,
		PaymentMethod: strOrNil(pi.paymentMethod), PaymentMethodTypes: []string{"card"}, Status: pi.status,
	}
	if pi.canceledAt != 0 {
		at := pi.canceledAt
		v.CanceledAt = &at
	}
	return v
}

func (ch *charge) view() *chargeJSON {
	paid := ch.status == StatusSucceeded
	v := &chargeJSON{
		ID: ch.id, Object: "charge", Amount: ch.amount, AmountRefunded: ch.refunded, Captured: paid,
		Created: ch.created, Currency: ch.currency, Disputed: ch.dispute != nil, FailureCode: strOrNil(ch.failureCode),
		FailureMessage: strOrNil(ch.failureMessage), Metadata: ch.metadata, Paid: paid,
		PaymentIntent: ch.intent, PaymentMethod: ch.paymentMethod,
		Refunded: paid && ch.refunded == ch.amount, Status: ch.status,
	}
	if paid {
		v.AmountCaptured = ch.amount
	}
	return v
}

func (re *refund) view() refundJSON {
	return refundJSON{
		ID: re.id, Object: "refund", Amount: re.amount, Charge: re.charge, Created: re.created,
		Currency: re.currency, Metadata: re.metadata, PaymentIntent: re.intent,
		Reason: strOrNil(re.reason), Status: "succeeded",
	}
}

func fail(e *apiError) (int, any) { return e.status, e }

// failAfterWrite: the chaos setting that answers 500 after a change was made.
func (s *Server) failAfterWrite(op Op, id string) bool {
	c := s.cfg.Chaos
	if c.FailAfterWrite != nil && c.FailAfterWrite(op, id) {
		return true
	}
	return c.FailAfterWriteRate > 0 && rand.Float64() < c.FailAfterWriteRate
}

var errInternal = &apiError{status: http.StatusInternalServerError, Type: apiErrorType, Code: "internal_error",
	Message: "An unknown error occurred."}

var errAfterWrite = &apiError{status: http.StatusInternalServerError, Type: apiErrorType, Code: "internal_error",
	Message: "An unknown error occurred (the simulator's chaos setting: the change was made)."}

// metadata reads metadata[key]=value parameters with Stripe's limits.
func metadata(c *caller) (map[string]string, *apiError) {
	md := map[string]string{}
	for name, vals := range c.form {
		k, ok := strings.CutPrefix(name, "metadata[")
		if !ok {
			continue
		}
		k, ok = strings.CutSuffix(k, "]")
		if !ok || k == "" || len(k) > 40 || len(vals) == 0 || len(vals[0]) > 500 {
			return nil, badRequest("parameter_invalid", name, "Invalid metadata parameter %s: keys are 1-40 characters, values up to 500.", name)
		}
		md[k] = vals[0]
	}
	if len(md) > 50 {
		return nil, badRequest("parameter_invalid", "metadata", "Metadata may have at most 50 keys.")
	}
	return md, nil
}

func amountParam(c *caller, name string, required bool) (int64, *apiError) {
	v := c.get(name)
	if v == "" {
		if required {
			return 0, badRequest("parameter_missing", name, "Missing required param: %s.", name)
		}
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, badRequest("parameter_invalid_integer", name, "Invalid integer: %s", v)
	}
	if n < 1 {
		return 0, badRequest("amount_too_small", name, "Amount must be at least 1.")
	}
	if n > 99_999_999 {
		return 0, badRequest("amount_too_large", name, "Amount must be no more than 99999999.")
	}
	return n, nil
}

// Stripe's length limits of the string parameters the simulator keeps.
const (
	maxDescription = 1000
)

func (s *Server) createIntent(r *http.Request, c *caller) (int, any) {
	if e := c.only("amount", "currency", "metadata[", "payment_method", "confirm", "description",
		"payment_method_types[", "expand["); e != nil {
		return fail(e)
	}
	amount, e := amountParam(c, "amount", true)
	if e != nil {
		return fail(e)
	}
	currency := strings.ToLower(c.get("currency"))
	if currency == "" {
		return fail(badRequest("parameter_missing", "currency", "Missing required param: currency."))
	}
	if len(currency) != 3 || strings.Trim(currency, "abcdefghijklmnopqrstuvwxyz") != "" {
		return fail(badRequest("parameter_invalid_string", "currency", "Invalid currency: %s.", currency))
	}
	md, e := metadata(c)
	if e != nil {
		return fail(e)
	}
	pm := c.get("payment_method")
	if _, ok := cardOutcome[pm]; pm != "" && !ok {
		return fail(noSuchParam("PaymentMethod", "payment_method", pm))
	}
	desc, e := c.stringParam("description", maxDescription)
	if e != nil {
		return fail(e)
	}
	confirm := c.get("confirm") == "true"
	if confirm && pm == "" {
		return fail(badRequest("parameter_missing", "payment_method", "A payment_method is needed to confirm on creation."))
	}
	id := "pi_" + randomID(24)
	pi := &intent{
		owner: c.key, id: id, secret: id + "_secret_" + randomID(25), currency: currency,
		status: StatusRequiresPaymentMethod, amount: amount, created: time.Now().Unix(), metadata: md,
		description: desc, paymentMethod: pm,
	}
	s.mu.Lock()
	if e := s.roomLocked(2, nil); e != nil { // the intent, and a charge if confirmed
		s.mu.Unlock()
		return fail(e)
	}
	s.addIntentLocked(pi)
	evts := []*event{s.newEvent(pi.owner, "payment_intent.created", pi.view())}
	status, body := http.StatusOK, any(nil)
	if confirm {
		var more []*event
		status, body, more = s.confirmLocked(pi, pm)
		evts = append(evts, more...)
	} else {
		body = pi.view()
	}
	s.mu.Unlock()
	s.hooks.enqueue(evts)
	if s.failAfterWrite(OpCreate, id) {
		return fail(errAfterWrite)
	}
	return status, body
}

// intentFor finds the payment intent of the path, checking the client_secret when the caller
// has no secret key (or sent one anyway).
func (s *Server) intentFor(r *http.Request, c *caller) (*intent, *apiError) {
	id := r.PathValue("id")
	pi := s.intents[id]
	if pi == nil || c.key != "" && pi.owner != c.key {
		return nil, noSuch("payment_intent", "intent", id)
	}
	cs := c.get("client_secret")
	if c.key == "" || cs != "" {
		if subtle.ConstantTimeCompare([]byte(cs), []byte(pi.secret)) != 1 {
			if c.key == "" && cs == "" {
				return nil, &apiError{status: http.StatusUnauthorized, Type: invalidRequest, Code: "api_key_invalid",
					Message: "You did not provide an API key, nor the payment intent's client_secret."}
			}
			return nil, badRequest("payment_intent_invalid_parameter", "client_secret",
				"The client_secret provided does not match the client_secret associated with the PaymentIntent.")
		}
	}
	return pi, nil
}

func (s *Server) getIntent(r *http.Request, c *caller) (int, any) {
	if e := c.only("client_secret", "expand["); e != nil {
		return fail(e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, e := s.intentFor(r, c)
	if e != nil {
		return fail(e)
	}
	return http.StatusOK, pi.view()
}

func (s *Server) confirmIntent(r *http.Request, c *caller) (int, any) {
	if e := c.only("client_secret", "payment_method", "return_url", "expand["); e != nil {
		return fail(e)
	}
	s.mu.Lock()
	pi, e := s.intentFor(r, c)
	if e == nil {
		e = s.roomLocked(1, pi) // its charge
	}
	if e != nil {
		s.mu.Unlock()
		return fail(e)
	}
	pm := c.get("payment_method")
	if pm == "" {
		pm = pi.paymentMethod
	}
	status, body, evts := s.confirmLocked(pi, pm)
	s.mu.Unlock()
	s.hooks.enqueue(evts)
	charged := status == http.StatusOK || status == http.StatusPaymentRequired // a change was made
	if charged && s.failAfterWrite(OpConfirm, pi.id) {
		return fail(errAfterWrite)
	}
	return status, body
}

// confirmLocked charges pi with the payment method pm (s.mu held), and returns the reply and
// the events to deliver.
func (s *Server) confirmLocked(pi *intent, pm string) (int, any, []*event) {
	if pm == "" {
		return http.StatusBadRequest, badRequest("payment_intent_unexpected_state", "payment_method",
			"You cannot confirm this PaymentIntent because it's missing a payment method."), nil
	}
	outcome, ok := cardOutcome[pm]
	if !ok {
		return http.StatusBadRequest, noSuchParam("PaymentMethod", "payment_method", pm), nil
	}
	if pi.status != StatusRequiresPaymentMethod {
		e := badRequest("payment_intent_unexpected_state", "",
			"You cannot confirm this PaymentIntent because it has a status of %s.", pi.status)
		e.PaymentIntent = pi.view()
		return e.status, e, nil
	}
	pi.paymentMethod = pm
	switch outcome {
	case StatusSucceeded:
		evts := s.succeedLocked(pi)
		return http.StatusOK, pi.view(), evts
	case StatusProcessing:
		pi.status, pi.lastError = StatusProcessing, nil
		id := pi.id
		if !s.closed {
			s.timers[id] = time.AfterFunc(s.cfg.AsyncDelay, func() { s.settleAsync(id) })
		}
		return http.StatusOK, pi.view(), []*event{s.newEvent(pi.owner, "payment_intent.processing", pi.view())}
	default: // declined
		evts := s.failLocked(pi, "card_declined", "Your card was declined.")
		e := &apiError{status: http.StatusPaymentRequired, Type: cardError, Code: "card_declined",
			DeclineCode: "generic_decline", Message: "Your card was declined.", PaymentIntent: pi.view(),
			PaymentMethod: pi.lastError.PaymentMethod}
		return e.status, e, evts
	}
}

// failLocked fails pi's charge with code and message (s.mu held): pi needs a payment method
// again, and the events Stripe sends for a failed charge are returned.
func (s *Server) failLocked(pi *intent, code, message string) []*event {
	pm := pi.paymentMethod
	ch := s.newChargeLocked(pi, "failed")
	ch.failureCode, ch.failureMessage = code, message
	pi.status, pi.paymentMethod, pi.latestCharge = StatusRequiresPaymentMethod, "", ch.id
	pi.lastError = &apiError{Type: cardError, Code: code, DeclineCode: "generic_decline",
		Message: message, PaymentMethod: &pmJSON{ID: pm, Object: "payment_method", Type: "card"}}
	return []*event{s.newEvent(pi.owner, "charge.failed", ch.view()),
		s.newEvent(pi.owner, "payment_intent.payment_failed", pi.view())}
}

func (s *Server) newChargeLocked(pi *intent, status string) *charge {
	ch := &charge{owner: pi.owner, id: "ch_" + randomID(24), intent: pi.id, currency: pi.currency, status: status,
		paymentMethod: pi.paymentMethod, amount: pi.amount, created: time.Now().Unix(), metadata: pi.metadata}
	s.charges[ch.id] = ch
	pi.charges = append(pi.charges, ch.id)
	return ch
}

// succeedLocked charges pi in full and returns the events Stripe sends for it; a payment made
// with CardDispute is disputed DisputeDelay later.
func (s *Server) succeedLocked(pi *intent) []*event {
	ch := s.newChargeLocked(pi, StatusSucceeded)
	pi.status, pi.received, pi.latestCharge, pi.lastError = StatusSucceeded, pi.amount, ch.id, nil
	if pi.paymentMethod == CardDispute && !s.closed {
		key, id := "dispute:"+ch.id, ch.id
		s.timers[key] = time.AfterFunc(s.cfg.DisputeDelay, func() { s.disputeCharge(key, id) })
	}
	return []*event{s.newEvent(pi.owner, "charge.succeeded", ch.view()), s.newEvent(pi.owner, "payment_intent.succeeded", pi.view())}
}

// disputeCharge opens a dispute on a succeeded charge (its holder told the bank it was not
// them), as Stripe's pm_card_createDispute does a moment after the payment.
func (s *Server) disputeCharge(timer, chargeID string) {
	s.mu.Lock()
	delete(s.timers, timer)
	ch := s.charges[chargeID]
	if s.closed || ch == nil || ch.status != StatusSucceeded || ch.dispute != nil {
		s.mu.Unlock()
		return
	}
	ch.dispute = &dispute{id: "dp_" + randomID(24), charge: ch.id, intent: ch.intent, currency: ch.currency,
		amount: ch.amount - ch.refunded, created: time.Now().Unix()}
	s.disputes++
	ev := s.newEvent(ch.owner, "charge.dispute.created", ch.dispute.view())
	s.mu.Unlock()
	s.hooks.enqueue([]*event{ev})
}

// settleAsync ends a pm_card_async payment: it succeeds, as Stripe's asynchronous methods
// succeed some time after confirmation (and can no longer be cancelled meanwhile); a
// pm_card_async_fail payment fails then instead, as a bank debit the bank returns.
func (s *Server) settleAsync(id string) {
	s.mu.Lock()
	delete(s.timers, id)
	pi := s.intents[id]
	if s.closed || pi == nil || pi.status != StatusProcessing {
		s.mu.Unlock()
		return
	}
	var evts []*event
	if pi.paymentMethod == CardAsyncFail {
		evts = s.failLocked(pi, "payment_method_provider_decline", "The bank returned the debit.")
	} else {
		evts = s.succeedLocked(pi)
	}
	if ev := s.sessionSettledLocked(pi); ev != nil {
		evts = append(evts, ev)
	}
	s.mu.Unlock()
	s.hooks.enqueue(evts)
}

var cancellationReasons = []string{"duplicate", "fraudulent", "requested_by_customer", "abandoned"}

func (s *Server) cancelIntent(r *http.Request, c *caller) (int, any) {
	if e := c.only("cancellation_reason", "expand["); e != nil {
		return fail(e)
	}
	reason := c.get("cancellation_reason")
	if reason != "" && !slices.Contains(cancellationReasons, reason) {
		return fail(badRequest("parameter_invalid_string", "cancellation_reason", "Invalid cancellation_reason: %s.", reason))
	}
	s.mu.Lock()
	pi, e := s.intentFor(r, c)
	if e != nil {
		s.mu.Unlock()
		return fail(e)
	}
	if pi.status != StatusRequiresPaymentMethod {
		e := badRequest("payment_intent_unexpected_state", "",
			"You cannot cancel this PaymentIntent because it has a status of %s.", pi.status)
		e.PaymentIntent = pi.view()
		s.mu.Unlock()
		return fail(e)
	}
	pi.status, pi.canceledAt, pi.cancellationReason = StatusCanceled, time.Now().Unix(), reason
	view := pi.view()
	ev := s.newEvent(pi.owner, "payment_intent.canceled", view)
	s.mu.Unlock()
	s.hooks.enqueue([]*event{ev})
	if s.failAfterWrite(OpCancel, pi.id) {
		return fail(errAfterWrite)
	}
	return http.StatusOK, view
}

var refundReasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

func (s *Server) createRefund(r *http.Request, c *caller) (int, any) {
	if e := c.only("payment_intent", "charge", "amount", "reason", "metadata[", "expand["); e != nil {
		return fail(e)
	}
	piID := c.get("payment_intent")
	chID := c.get("charge")
	if piID == "" && chID == "" {
		return fail(badRequest("parameter_missing", "payment_intent", "Missing required param: payment_intent."))
	}
	amount, e := amountParam(c, "amount", false)
	if e != nil {
		return fail(e)
	}
	reason := c.get("reason")
	if reason != "" && !slices.Contains(refundReasons, reason) {
		return fail(badRequest("parameter_invalid_string", "reason", "Invalid reason: %s.", reason))
	}
	md, e := metadata(c)
	if e != nil {
		return fail(e)
	}
	s.mu.Lock()
	var pi *intent
	if piID != "" {
		if pi = s.intents[piID]; pi == nil || pi.owner != c.key {
			s.mu.Unlock()
			return fail(noSuchParam("payment_intent", "payment_intent", piID))
		}
	} else {
		ch := s.charges[chID]
		if ch == nil || ch.owner != c.key {
			s.mu.Unlock()
			return fail(noSuchParam("charge", "charge", chID))
		}
		pi = s.intents[ch.intent]
	}
	if e := s.roomLocked(1, pi); e != nil {
		s.mu.Unlock()
		return fail(e)
	}
	if pi.status != StatusSucceeded {
		s.mu.Unlock()
		return fail(badRequest("payment_intent_unexpected_state", "payment_intent",
			"This PaymentIntent (%s) does not have a successful charge to refund (status %s).", pi.id, pi.status))
	}
	ch := s.charges[pi.latestCharge]
	if ch.dispute != nil {
		s.mu.Unlock()
		return fail(badRequest("charge_disputed", "", "Charge %s has been charged back; cannot issue a refund.", ch.id))
	}
	left := ch.amount - ch.refunded
	if left == 0 {
		s.mu.Unlock()
		return fail(badRequest("charge_already_refunded", "", "Charge %s has already been refunded.", ch.id))
	}
	if amount == 0 {
		amount = left
	}
	if amount > left {
		s.mu.Unlock()
		return fail(badRequest("amount_too_large", "amount",
			"Refund amount (%d) is greater than unrefunded amount on charge (%d).", amount, left))
	}
	ch.refunded += amount
	s.seq++
	re := &refund{owner: c.key, id: "re_" + randomID(24), charge: ch.id, intent: pi.id, currency: pi.currency, reason: reason,
		amount: amount, created: time.Now().Unix(), seq: s.seq, metadata: md}
	s.refunds[re.id] = re
	pi.refunds = append(pi.refunds, re.id)
	view := re.view()
	evts := []*event{s.newEvent(c.key, "charge.refunded", ch.view()), s.newEvent(c.key, "refund.created", view)}
	s.mu.Unlock()
	s.hooks.enqueue(evts)
	if s.failAfterWrite(OpRefund, pi.id) {
		return fail(errAfterWrite)
	}
	return http.StatusOK, view
}

func (s *Server) getRefund(r *http.Request, c *caller) (int, any) {
	if e := c.only("expand["); e != nil {
		return fail(e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	re := s.refunds[r.PathValue("id")]
	if re == nil || re.owner != c.key {
		return fail(noSuch("refund", "id", r.PathValue("id")))
	}
	return http.StatusOK, re.view()
}

// listRefunds is GET /v1/refunds, newest first, filtered by payment_intent or charge, with
// Stripe's limit / starting_after pagination.
func (s *Server) listRefunds(r *http.Request, c *caller) (int, any) {
	if e := c.only("payment_intent", "charge", "limit", "starting_after", "expand["); e != nil {
		return fail(e)
	}
	limit, e := limitParam(c)
	if e != nil {
		return fail(e)
	}
	piID, chID, after := c.get("payment_intent"), c.get("charge"), c.get("starting_after")
	s.mu.Lock()
	defer s.mu.Unlock()
	var pi *intent
	if piID != "" {
		if pi = s.intents[piID]; pi == nil || pi.owner != c.key {
			return fail(noSuchParam("payment_intent", "payment_intent", piID))
		}
	}
	if chID != "" {
		ch := s.charges[chID]
		if ch == nil || ch.owner != c.key {
			return fail(noSuchParam("charge", "charge", chID))
		}
		if pi == nil {
			pi = s.intents[ch.intent]
		}
	}
	// A listing without a payment reads every refund of the caller's: fine for a simulator
	// whose objects are bounded.
	var all []*refund
	if pi != nil {
		for _, id := range pi.refunds {
			if re := s.refunds[id]; re != nil && (chID == "" || re.charge == chID) {
				all = append(all, re)
			}
		}
	} else {
		for _, re := range s.refunds {
			if re.owner == c.key {
				all = append(all, re)
			}
		}
	}
	slices.SortFunc(all, func(a, b *refund) int { return int(b.seq - a.seq) })
	if after != "" {
		i := slices.IndexFunc(all, func(re *refund) bool { return re.id == after })
		if i < 0 {
			return fail(noSuchParam("refund", "starting_after", after))
		}
		all = all[i+1:]
	}
	data := []refundJSON{}
	out := listJSON{Object: "list", URL: "/v1/refunds"}
	for i, re := range all {
		if i == limit {
			out.HasMore = true
			break
		}
		data = append(data, re.view())
	}
	out.Data = data
	return http.StatusOK, out
}

func limitParam(c *caller) (int, *apiError) {
	v := c.get("limit")
	if v == "" {
		return 10, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, badRequest("parameter_invalid_integer", "limit", "limit must be an integer from 1 to 100.")
	}
	return n, nil
}

package payment

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v85/webhook"
)

// Tolerance is how far a webhook's signed time may be from now, either way.
const Tolerance = 300 * time.Second

// verifySignature accepts a Stripe-Signature header when one v1 signature is valid under one of
// the secrets and t is within Tolerance of now, either way. stripe-go checks only the past side;
// a signature dated later (a leaked secret, a clock far ahead) could be replayed until its date.
func verifySignature(raw []byte, header string, secrets []string, now time.Time) error {
	t, ok := signedAt(header)
	if !ok {
		return ErrBadSignature
	}
	if d := now.Sub(t); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: signed at %s, now %s", ErrBadSignature, t.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		if webhook.ValidatePayloadWithTolerance(raw, header, secret, Tolerance) == nil {
			return nil
		}
	}
	return ErrBadSignature
}

// signedAt is the header's t. A header with more than one t is refused: stripe-go verifies
// the signature against the last one, so a second t would let a signature made for the future
// pass with a first t of now.
func signedAt(header string) (time.Time, bool) {
	var at time.Time
	for _, part := range strings.Split(header, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
			sec, err := strconv.ParseInt(v, 10, 64)
			if err != nil || sec <= 0 || !at.IsZero() {
				return time.Time{}, false
			}
			at = time.Unix(sec, 0)
		}
	}
	return at, !at.IsZero()
}

// decodeEvent reads the event's id, type and object (a Checkout Session, a PaymentIntent, a
// charge or a dispute)
// from a verified body. A body that is not such an event is ErrBadSignature's sibling:
// nothing a provider signs, answered 400 too.
func decodeEvent(raw []byte) (Event, error) {
	var e struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Data struct {
			Object struct {
				ID            string            `json:"id"`
				Object        string            `json:"object"`
				Status        string            `json:"status"`
				PaymentStatus string            `json:"payment_status"`
				PaymentIntent json.RawMessage   `json:"payment_intent"`
				Amount        int64             `json:"amount"`
				AmountTotal   int64             `json:"amount_total"`
				Currency      string            `json:"currency"`
				Metadata      map[string]string `json:"metadata"`
				AmountRefund  int64             `json:"amount_refunded"`
				Refunded      bool              `json:"refunded"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.ID == "" || e.Type == "" {
		return Event{}, fmt.Errorf("%w: not a provider event", ErrBadSignature)
	}
	o := e.Data.Object
	ev := Event{ID: e.ID, Type: e.Type, Status: o.Status, PaymentStatus: o.PaymentStatus,
		Currency: o.Currency, Metadata: o.Metadata}
	switch o.Object {
	case "checkout.session":
		ev.SessionID, ev.AmountCents = o.ID, o.AmountTotal
		ev.PaymentIntent = expandableID(o.PaymentIntent)
	case "payment_intent":
		ev.PaymentIntent, ev.AmountCents = o.ID, o.Amount
	case "charge", "dispute":
		ev.PaymentIntent, ev.AmountCents = expandableID(o.PaymentIntent), o.Amount
		ev.RefundedCents, ev.Refunded = o.AmountRefund, o.Refunded
	}
	return ev, nil
}

// expandableID is the id of a field Stripe sends as an id string or an expanded object.
func expandableID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &obj) // null or malformed: no id
	return obj.ID
}

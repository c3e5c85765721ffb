package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/flashsale/flashsale/internal/record"
)

// Money drift kinds: a payment at the provider and the record disagree about money.
const (
	// MoneyPaymentWithoutOrder: a succeeded payment (not refunded in full) whose order is not
	// paid in the record, or whose order another payment paid. --repair refunds it.
	MoneyPaymentWithoutOrder = "payment_without_order"
	// MoneyPaidWithoutPayment: the record has an order paid by a payment that did not succeed
	// at the provider (or that the provider does not list).
	MoneyPaidWithoutPayment = "paid_without_payment"
	// MoneyAmountMismatch: the payment that paid an order is not the order's amount.
	MoneyAmountMismatch = "amount_mismatch"
	// MoneyRefundMissing: the record says the payment was refunded; the provider has not
	// refunded it in full.
	MoneyRefundMissing = "refund_missing"
)

// DefaultMoneyWindow is how far back a batch lists the provider's payments: as long as
// Stripe retries a webhook, so a payment whose events may still come is in it.
const DefaultMoneyWindow = 72 * time.Hour

// ProviderPayment is one payment as the provider lists it.
type ProviderPayment struct {
	ID            string
	Status        string // "succeeded", "processing", "canceled", ...
	AmountCents   int64
	Currency      string
	RefundedCents int64
	OrderID       string // metadata[order_id]: "" for a payment that is not a shop's order
	Attempt       string // metadata[flashsale_attempt]: the checkout attempt it was made under
	Created       time.Time
}

// MoneyProvider lists the provider's payments and refunds one (payment.Stripe, adapted).
type MoneyProvider interface {
	// ListPayments calls fn with every payment created at or after since, page by page.
	ListPayments(ctx context.Context, since time.Time, fn func(ProviderPayment) error) error
	// Refund refunds a succeeded payment in full, once (the same Idempotency-Key every time).
	Refund(ctx context.Context, paymentID string) error
}

// MoneyRecord is what the money check reads from the record (*record.Queries has it).
type MoneyRecord interface {
	RecordedAttempts(ctx context.Context, attempts []string) (map[string]string, error)
	OrdersMoney(ctx context.Context, ids []string) (map[string]record.OrderMoney, error)
	SucceededPayments(ctx context.Context, from, to time.Time) ([]record.RecordedPayment, error)
}

// MoneyDrift is one payment whose money the record does not account for.
type MoneyDrift struct {
	Kind           string `json:"kind"`
	PaymentID      string `json:"payment_id"`
	OrderID        string `json:"order_id"`
	ProviderStatus string `json:"provider_status"` // "" when the provider does not list it
	ProviderCents  int64  `json:"provider_cents"`  // the payment's amount (refunded: what was refunded)
	RecordCents    int64  `json:"record_cents"`    // the order's amount in the record
	OrderStatus    string `json:"order_status"`    // in the record ("" = no such order)
	// Repair is what --repair did: "refunded", "refund failed: …", or "recorded" (reported
	// in the stored run for a person to act on).
	Repair string `json:"repair,omitempty"`
}

// MoneyCheck is what the batch found comparing the provider's payments with the record.
type MoneyCheck struct {
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Listed int       `json:"listed"` // payments the provider listed in [from, to)
	// Foreign counts those that are not this shop's: no flashsale_attempt in their metadata,
	// or one the record does not hold for the order they name (the shop's other sales on the
	// account, another deployment's). They are left alone: never reported, never refunded.
	Foreign int          `json:"foreign"`
	Drift   []MoneyDrift `json:"drift"`
	// Skipped says why the check did not run ("" when it did).
	Skipped string `json:"skipped,omitempty"`
}

// unrepaired counts the drift --repair did not resolve.
func (m *MoneyCheck) unrepaired() int {
	if m == nil {
		return 0
	}
	n := 0
	for _, d := range m.Drift {
		if d.Repair != "refunded" {
			n++
		}
	}
	return n
}

const moneyPage = 500 // provider payments judged per record query

// checkMoney checks the provider's payments of the window that are the shop's (an attempt
// recorded for the order their metadata names) against the record, then the record's succeeded
// payments against the listing, judging a candidate again after QuietFor so an order.paid on its
// way is not drift. With repair, a payment without an order is refunded.
func (r *Reconciler) checkMoney(ctx context.Context, repair bool) (*MoneyCheck, error) {
	mp := r.opt.Money
	if mp == nil {
		return nil, nil
	}
	rec, ok := r.db.(MoneyRecord)
	if !ok {
		return nil, nil
	}
	window := r.opt.MoneyWindow
	if window <= 0 {
		window = DefaultMoneyWindow
	}
	now := time.Now().UTC()
	out := &MoneyCheck{From: now.Add(-window), To: now, Drift: []MoneyDrift{}}
	pass := &moneyPass{rec: rec, out: out, seen: map[string]ProviderPayment{}, seenAttempts: map[string]bool{}}
	if err := pass.list(ctx, mp); err != nil {
		// The provider (or the record) could not be read: the orders' check still stands;
		// this one is reported as not done, and the batch does not pass.
		slog.Warn("reconcile: money check skipped", "err", err)
		return &MoneyCheck{From: out.From, To: out.To, Listed: out.Listed, Drift: []MoneyDrift{}, Skipped: err.Error()}, nil
	}
	missing, err := pass.unlisted(ctx, now)
	if err != nil {
		return nil, fmt.Errorf("reconcile: money: %w", err)
	}
	if err := pass.judgeAgain(ctx, r.opt.QuietFor); err != nil {
		return nil, err
	}
	for _, rp := range missing {
		id := rp.PaymentIntent
		if id == "" {
			id = rp.ID
		}
		out.Drift = append(out.Drift, MoneyDrift{Kind: MoneyPaidWithoutPayment, PaymentID: id, OrderID: rp.OrderID,
			RecordCents: rp.AmountCents, OrderStatus: "paid"})
	}
	if repair {
		repairMoney(ctx, mp, out.Drift)
	}
	return out, nil
}

// moneyPass is one money check on its way: the shop's payments the provider listed, and the
// candidates for drift.
type moneyPass struct {
	rec          MoneyRecord
	out          *MoneyCheck
	seen         map[string]ProviderPayment // by payment id
	seenAttempts map[string]bool
	page         []ProviderPayment
	cands        []ProviderPayment
}

// list reads the provider's payments of the window a page at a time and keeps the shop's
// drift candidates.
func (m *moneyPass) list(ctx context.Context, mp MoneyProvider) error {
	err := mp.ListPayments(ctx, m.out.From, func(p ProviderPayment) error {
		m.out.Listed++
		if p.OrderID == "" || p.Attempt == "" {
			m.out.Foreign++
			return nil
		}
		m.page = append(m.page, p)
		if len(m.page) == moneyPage {
			return m.flush(ctx)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return m.flush(ctx)
}

func (m *moneyPass) flush(ctx context.Context) error {
	mine, err := m.ours(ctx, m.page)
	if err != nil {
		return err
	}
	ds, err := m.judge(ctx, mine)
	if err != nil {
		return err
	}
	for _, d := range ds {
		m.cands = append(m.cands, m.seen[d.PaymentID])
	}
	m.page = m.page[:0]
	return nil
}

// ours keeps the payments of a page whose attempt the record holds for their order.
func (m *moneyPass) ours(ctx context.Context, ps []ProviderPayment) ([]ProviderPayment, error) {
	atts := make([]string, 0, len(ps))
	for _, p := range ps {
		atts = append(atts, p.Attempt)
	}
	recorded, err := m.rec.RecordedAttempts(ctx, atts)
	if err != nil {
		return nil, err
	}
	kept := ps[:0]
	for _, p := range ps {
		if oid, ok := recorded[p.Attempt]; ok && oid == p.OrderID {
			kept = append(kept, p)
			m.seen[p.ID], m.seenAttempts[p.Attempt] = p, true
		} else {
			m.out.Foreign++
		}
	}
	return kept, nil
}

// judge returns the drift of a page of the shop's payments against their orders' record.
func (m *moneyPass) judge(ctx context.Context, ps []ProviderPayment) ([]MoneyDrift, error) {
	ids := make([]string, 0, len(ps))
	for _, p := range ps {
		ids = append(ids, p.OrderID)
	}
	om, err := m.rec.OrdersMoney(ctx, ids)
	if err != nil {
		return nil, err
	}
	var ds []MoneyDrift
	for _, p := range ps {
		o, found := om[p.OrderID]
		if d, bad := judgePayment(p, o, found); bad {
			ds = append(ds, d)
		}
	}
	return ds, nil
}

// unlisted returns the record's succeeded payments the provider did not list as succeeded.
// Only those a day into the window: a payment is created up to a day (a session's longest
// life) before it succeeds, so an older one may be listed before the window.
func (m *moneyPass) unlisted(ctx context.Context, now time.Time) ([]record.RecordedPayment, error) {
	recs, err := m.rec.SucceededPayments(ctx, m.out.From.Add(24*time.Hour), now)
	if err != nil {
		return nil, err
	}
	var missing []record.RecordedPayment
	for _, rp := range recs {
		// A row is keyed by its Checkout Session; the provider lists its PaymentIntent, known
		// by the row's payment_intent or, as the same attempt, by its metadata.
		pi := rp.PaymentIntent
		if pi == "" && strings.HasPrefix(rp.ID, "pi_") {
			pi = rp.ID
		}
		_, listed := m.seen[pi]
		if rp.Attempt != "" && m.seenAttempts[rp.Attempt] {
			listed = true
		}
		if !listed && (pi != "" || rp.Attempt != "") {
			missing = append(missing, rp)
		}
	}
	return missing, nil
}

// judgeAgain judges the candidates once more after quiet, once in-flight events had time to
// land, and keeps what is still drift.
func (m *moneyPass) judgeAgain(ctx context.Context, quiet time.Duration) error {
	if len(m.cands) == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(quiet):
	}
	for i := 0; i < len(m.cands); i += moneyPage {
		ds, err := m.judge(ctx, m.cands[i:min(i+moneyPage, len(m.cands))])
		if err != nil {
			return fmt.Errorf("reconcile: money: %w", err)
		}
		m.out.Drift = append(m.out.Drift, ds...)
	}
	return nil
}

// repairMoney refunds each payment without an order and marks the rest recorded.
func repairMoney(ctx context.Context, mp MoneyProvider, drift []MoneyDrift) {
	for i := range drift {
		d := &drift[i]
		if d.Kind != MoneyPaymentWithoutOrder {
			d.Repair = "recorded"
			continue
		}
		if err := mp.Refund(ctx, d.PaymentID); err != nil {
			d.Repair = "refund failed: " + err.Error()
			continue
		}
		d.Repair = "refunded"
		slog.Warn("reconcile: refunded a payment without an order", "payment", d.PaymentID, "order", d.OrderID, "cents", d.ProviderCents)
	}
}

// judgePayment says whether one of the shop's payments at the provider is drift against its
// order in the record (found: the record has the order).
func judgePayment(p ProviderPayment, o record.OrderMoney, found bool) (MoneyDrift, bool) {
	d := MoneyDrift{PaymentID: p.ID, OrderID: p.OrderID, ProviderStatus: p.Status, ProviderCents: p.AmountCents,
		RecordCents: o.AmountCents, OrderStatus: o.Status}
	var mine *record.RecordedPayment // the record's row of this payment
	othersPaid := false              // another payment paid the order
	unknownRows := false             // rows that name neither an attempt nor a PaymentIntent: cannot tell
	for i := range o.Payments {
		rp := &o.Payments[i]
		switch {
		// One attempt is one Checkout Session with one PaymentIntent: the row of the attempt
		// (keyed by its session) is this payment's.
		case rp.Attempt != "" && rp.Attempt == p.Attempt, rp.ID == p.ID, rp.PaymentIntent == p.ID:
			mine = rp
		case rp.Attempt == "" && rp.PaymentIntent == "" && !strings.HasPrefix(rp.ID, "pi_"):
			unknownRows = true
		case rp.Status == "succeeded":
			othersPaid = true
		}
	}
	refundedInFull := p.RefundedCents >= p.AmountCents
	if p.Status != "succeeded" {
		if mine != nil && mine.Status == "succeeded" && o.Status == "paid" {
			d.Kind = MoneyPaidWithoutPayment
			return d, true
		}
		return d, false
	}
	if mine != nil && mine.Status == "refunded" || found && o.Status == "refunded" {
		if !refundedInFull {
			d.Kind, d.ProviderCents = MoneyRefundMissing, p.RefundedCents
			return d, true
		}
		return d, false
	}
	if refundedInFull {
		return d, false
	}
	if !found || o.Status != "paid" || othersPaid && (mine == nil || mine.Status != "succeeded") {
		d.Kind = MoneyPaymentWithoutOrder
		return d, true
	}
	if (mine != nil || unknownRows || len(o.Payments) == 0) && p.AmountCents != o.AmountCents {
		d.Kind = MoneyAmountMismatch
		return d, true
	}
	return d, false
}

package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/paysim"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

const moneyKey = "sk_test_reconcile-money-0123"

// moneyOf adapts the stripe provider as cmd/reconciler does.
type moneyOf struct{ *payment.Stripe }

func (m moneyOf) ListPayments(ctx context.Context, since time.Time, fn func(reconcile.ProviderPayment) error) error {
	return m.Stripe.ListPayments(ctx, since, func(p payment.ProviderPayment) error {
		return fn(reconcile.ProviderPayment{ID: p.ID, Status: p.Status, AmountCents: p.AmountCents, Currency: p.Currency,
			RefundedCents: p.RefundedCents, OrderID: p.OrderID, Attempt: p.Attempt, Created: p.Created})
	})
}

// moneyEnv is a simulator, a throw-away record and a reconciler that checks money between them.
type moneyEnv struct {
	t   testing.TB
	sim *paysim.Server
	st  *payment.Stripe // the shop's provider client, as the api and the reconciler use it
	db  *pgxpool.Pool
	rec *record.Queries
	r   *reconcile.Reconciler
}

func newMoneyEnv(t testing.TB, maxObjects int) *moneyEnv {
	t.Helper()
	sim := paysim.New(paysim.Config{APIKey: moneyKey, MaxObjects: maxObjects, Logger: slog.New(slog.DiscardHandler)})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	dsn := testenv.Postgres(t)
	db, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	rec, err := record.OpenQueries(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	rdb, keys := testenv.Redis(t)
	st := payment.ProviderFor(payment.ProviderSim, sim.Addr(), moneyKey, "", "", nil)
	r := reconcile.New(rdb, keys, rec, options.Reconcile(reconcile.Options{Money: moneyOf{st}, QuietFor: 10 * time.Millisecond}))
	return &moneyEnv{t: t, sim: sim, st: st, db: db, rec: rec, r: r}
}

// pay makes a payment at the simulator for order under the attempt attemptOf(order) (no
// order: a payment that is not a shop's); card "" leaves it open.
func (m *moneyEnv) pay(key, order string, cents int64, card string) string {
	return m.payAttempt(key, order, attemptOf(order), cents, card)
}

// attemptOf is the checkout attempt the tests make order's payment under.
func attemptOf(order string) string { return "fsa_" + strings.ReplaceAll(order, ".", "_") }

// payAttempt is pay under the given attempt ("": none in the metadata).
func (m *moneyEnv) payAttempt(key, order, attempt string, cents int64, card string) string {
	m.t.Helper()
	form := url.Values{"amount": {fmt.Sprint(cents)}, "currency": {"usd"}}
	if order != "" {
		form.Set("metadata[order_id]", order)
	}
	if attempt != "" {
		form.Set("metadata[flashsale_attempt]", attempt)
	}
	if card != "" {
		form.Set("confirm", "true")
		form.Set("payment_method", card)
	}
	req, _ := http.NewRequest("POST", m.sim.URL()+"/v1/payment_intents", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Fatal(err)
	}
	defer res.Body.Close()
	var pi struct{ ID string }
	if err := jsonDecode(res, &pi); err != nil || res.StatusCode != 200 && res.StatusCode != 402 {
		m.t.Fatalf("create payment: %d %v", res.StatusCode, err)
	}
	return pi.ID
}

// order records an order and, with pid, its payment under attemptOf(id).
func (m *moneyEnv) order(id, status string, cents int64, pid, pstatus string) {
	m.t.Helper()
	ctx := context.Background()
	if _, err := m.db.Exec(ctx, `INSERT INTO orders (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at)
		VALUES ($1, 'M', 'u', 1, $2, $3, now(), now())`, id, cents, status); err != nil {
		m.t.Fatal(err)
	}
	if pid == "" {
		return
	}
	refunded := int64(0)
	if pstatus == "refunded" {
		refunded = cents
	}
	m.payment(pid, id, attemptOf(id), "", cents, pstatus, refunded)
}

// payment records a payments row (attempt, pi "": not recorded).
func (m *moneyEnv) payment(id, order, attempt, pi string, cents int64, status string, refunded int64) {
	m.t.Helper()
	if _, err := m.db.Exec(context.Background(), `INSERT INTO payments (id, order_id, provider, amount_cents, status, refunded_cents,
		created_at, updated_at, attempt, payment_intent)
		VALUES ($1, $2, 'sim', $3, $4, $5, now(), now(), NULLIF($6, ''), NULLIF($7, ''))`, id, order, cents, status, refunded, attempt, pi); err != nil {
		m.t.Fatal(err)
	}
}

func kinds(c *reconcile.MoneyCheck) []string {
	var out []string
	for _, d := range c.Drift {
		out = append(out, d.Kind+" "+d.OrderID)
	}
	sort.Strings(out)
	return out
}

// TestMoneyReconciliation: the batch lists the provider's payments and reports each kind of
// money drift; --repair refunds a payment without an order, after which it is no drift.
func TestMoneyReconciliation(t *testing.T) {
	m := newMoneyEnv(t, 0)
	ok := m.pay(moneyKey, "M.1", 1000, paysim.CardVisa)
	m.order("M.1", "paid", 1000, ok, "succeeded")
	m.pay(moneyKey, "M.2", 1000, paysim.CardVisa) // the order expired: kept money
	m.order("M.2", "expired", 1000, "cs_M2", "open")
	m.pay(moneyKey, "M.3", 1000, paysim.CardVisa) // its attempt recorded, its order not
	m.payment("cs_M3", "M.3", attemptOf("M.3"), "", 1000, "open", 0)
	short := m.pay(moneyKey, "M.4", 900, paysim.CardVisa)
	m.order("M.4", "paid", 1000, short, "succeeded")
	unrefunded := m.pay(moneyKey, "M.5", 1000, paysim.CardVisa)
	m.order("M.5", "expired", 1000, unrefunded, "refunded")
	open := m.pay(moneyKey, "M.6", 1000, "")
	m.order("M.6", "paid", 1000, open, "succeeded")
	m.order("M.7", "paid", 1000, "pi_never0000000000000000", "succeeded")
	m.pay(moneyKey, "", 500, paysim.CardVisa)                          // not a shop order's: left alone
	m.pay("sk_test_another-account-000", "M.1", 1000, paysim.CardVisa) // another account's: never listed
	m.pay(moneyKey, "M.8", 1000, paysim.CardDeclined)                  // declined: nothing kept
	m.order("M.8", "reserved", 1000, "cs_M8", "open")

	c, err := m.r.CheckMoney(context.Background(), false)
	if err != nil || c.Skipped != "" {
		t.Fatal(err, c)
	}
	want := []string{
		"amount_mismatch M.4", "paid_without_payment M.6", "paid_without_payment M.7",
		"payment_without_order M.2", "payment_without_order M.3", "refund_missing M.5",
	}
	if got := kinds(c); strings.Join(got, ",") != strings.Join(want, ",") || c.Listed != 8 || c.Foreign != 1 {
		t.Fatalf("drift %v (listed %d, foreign %d), want %v", got, c.Listed, c.Foreign, want)
	}
	c, err = m.r.CheckMoney(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	refunded := 0
	for _, d := range c.Drift {
		switch {
		case d.Kind == reconcile.MoneyPaymentWithoutOrder && d.Repair == "refunded":
			refunded++
		case d.Kind != reconcile.MoneyPaymentWithoutOrder && d.Repair == "recorded":
		default:
			t.Errorf("repair of %+v", d)
		}
	}
	if refunded != 2 {
		t.Fatalf("%d payments refunded, want 2", refunded)
	}
	c, err = m.r.CheckMoney(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(c); len(got) != 4 {
		t.Fatalf("after the repair: %v, want the 4 a person must look at", got)
	}
}

// checkout opens a Checkout Session for order under attempt at the simulator, as the api does,
// and with card pays it on its hosted page ("" leaves it open). It returns the session and
// its PaymentIntent ("" when unpaid).
func (m *moneyEnv) checkout(order, attempt string, cents int64, card string) (string, string) {
	m.t.Helper()
	ctx := context.Background()
	cs, err := m.st.CreateCheckout(ctx, payment.CheckoutRequest{OrderID: order, UserID: "u", Attempt: attempt,
		ItemName: "item", Quantity: 1, UnitAmount: cents, Currency: "usd",
		SuccessURL: "http://shop.test/?ok", CancelURL: "http://shop.test/?cancel", ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		m.t.Fatal(err)
	}
	if card == "" {
		return cs.ID, ""
	}
	if _, err := paysim.PaySession(ctx, cs.URL, card); err != nil {
		m.t.Fatal(err)
	}
	if cs, err = m.st.GetCheckout(ctx, cs.ID); err != nil || cs.PaymentIntent == "" {
		m.t.Fatalf("session %s after paying: %+v %v", cs.ID, cs, err)
	}
	return cs.ID, cs.PaymentIntent
}

// refunds are the refunds the simulator made of a PaymentIntent.
func (m *moneyEnv) refunds(pi string) int {
	m.t.Helper()
	req, _ := http.NewRequest("GET", m.sim.URL()+"/v1/refunds?payment_intent="+pi, nil)
	req.Header.Set("Authorization", "Bearer "+moneyKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Fatal(err)
	}
	defer res.Body.Close()
	var list struct{ Data []json.RawMessage }
	if err := jsonDecode(res, &list); err != nil || res.StatusCode != 200 {
		m.t.Fatalf("refunds of %s: %d %v", pi, res.StatusCode, err)
	}
	return len(list.Data)
}

// TestMoneyReconciliationOfCheckouts: a Checkout Session's payment is the shop's only when the
// record holds its attempt for the order it names (the PaymentIntent, often unrecorded, is
// matched to its row by the attempt). Another deployment's payments on the account and sales
// without an attempt are never reported, and --repair never refunds them.
func TestMoneyReconciliationOfCheckouts(t *testing.T) {
	m := newMoneyEnv(t, 0)
	// Paid by its session; the record has the session, not its PaymentIntent: no drift.
	cs1, _ := m.checkout("S.1", "fsa_S1", 1000, paysim.CardVisa)
	m.order("S.1", "paid", 1000, "", "")
	m.payment(cs1, "S.1", "fsa_S1", "", 1000, "succeeded", 0)
	// Paid in the record by a session nobody paid at the provider.
	cs2, _ := m.checkout("S.2", "fsa_S2", 1000, "")
	m.order("S.2", "paid", 1000, "", "")
	m.payment(cs2, "S.2", "fsa_S2", "", 1000, "succeeded", 0)
	// Its attempt recorded open, the order expired, the page paid: money kept for nothing.
	cs3, pi3 := m.checkout("S.3", "fsa_S3", 1000, paysim.CardVisa)
	m.order("S.3", "expired", 1000, "", "")
	m.payment(cs3, "S.3", "fsa_S3", "", 1000, "open", 0)
	// Paid by one attempt; a second attempt's session paid too: that one pays no order.
	cs4a, _ := m.checkout("S.4", "fsa_S4a", 1000, paysim.CardVisa)
	cs4b, pi4b := m.checkout("S.4", "fsa_S4b", 1000, paysim.CardVisa)
	m.order("S.4", "paid", 1000, "", "")
	m.payment(cs4a, "S.4", "fsa_S4a", "", 1000, "succeeded", 0)
	m.payment(cs4b, "S.4", "fsa_S4b", "", 1000, "open", 0)
	// Refunded in the record, with its PaymentIntent; not at the provider.
	cs5, pi5 := m.checkout("S.5", "fsa_S5", 1000, paysim.CardVisa)
	m.order("S.5", "refunded", 1000, "", "")
	m.payment(cs5, "S.5", "fsa_S5", pi5, 1000, "refunded", 1000)
	// Another deployment on the same account: the same order ids, its own attempts.
	_, otherExpired := m.checkout("S.3", "fsa_other3", 1000, paysim.CardVisa)
	_, otherPaid := m.checkout("S.1", "fsa_other1", 900, paysim.CardVisa)
	_, otherGone := m.checkout("S.9", "fsa_other9", 1000, paysim.CardVisa)
	// The shop's other sales: an order id, no attempt.
	noAttempt := m.payAttempt(moneyKey, "S.3", "", 1000, paysim.CardVisa)

	c, err := m.r.CheckMoney(context.Background(), false)
	if err != nil || c.Skipped != "" {
		t.Fatal(err, c)
	}
	want := []string{"paid_without_payment S.2", "payment_without_order S.3", "payment_without_order S.4", "refund_missing S.5"}
	if got := kinds(c); strings.Join(got, ",") != strings.Join(want, ",") || c.Listed != 9 || c.Foreign != 4 {
		t.Fatalf("drift %v (listed %d, foreign %d), want %v (listed 9, foreign 4)", got, c.Listed, c.Foreign, want)
	}
	for _, d := range c.Drift {
		switch d.OrderID {
		case "S.2":
			if d.PaymentID != cs2 {
				t.Errorf("S.2 drift names %q, want its session %q", d.PaymentID, cs2)
			}
		case "S.3":
			if d.PaymentID != pi3 {
				t.Errorf("S.3 drift names %q, want %q", d.PaymentID, pi3)
			}
		case "S.4":
			if d.PaymentID != pi4b {
				t.Errorf("S.4 drift names %q, want the second attempt's %q", d.PaymentID, pi4b)
			}
		}
	}
	if _, err := m.r.CheckMoney(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	for pi, want := range map[string]int{pi3: 1, pi4b: 1, pi5: 0, otherExpired: 0, otherPaid: 0, otherGone: 0, noAttempt: 0} {
		if got := m.refunds(pi); got != want {
			t.Errorf("%s refunded %d times, want %d", pi, got, want)
		}
	}
}

func jsonDecode(res *http.Response, v any) error { return json.NewDecoder(res.Body).Decode(v) }

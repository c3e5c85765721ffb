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
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

const moneyKey = "sk_test_reconcile-money-0123"

// moneyOf adapts the stripe provider as cmd/reconciler does.
type moneyOf struct{ *payment.Stripe }

func (m moneyOf) ListPayments(ctx context.Context, since time.Time, fn func(reconcile.ProviderPayment) error) error {
	return m.Stripe.ListPayments(ctx, since, func(p payment.ProviderPayment) error {
		return fn(reconcile.ProviderPayment{ID: p.ID, Status: p.Status, AmountCents: p.AmountCents, Currency: p.Currency,
			RefundedCents: p.RefundedCents, OrderID: p.OrderID, Created: p.Created})
	})
}

// moneyEnv is a simulator, a throw-away record and a reconciler that checks money between them.
type moneyEnv struct {
	t   testing.TB
	sim *paysim.Server
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
	r := reconcile.New(rdb, keys, rec, reconcile.Options{Money: moneyOf{st}, QuietFor: 10 * time.Millisecond})
	return &moneyEnv{t: t, sim: sim, db: db, rec: rec, r: r}
}

// pay makes a payment at the simulator for order (no order: a payment that is not a shop's);
// card "" leaves it open.
func (m *moneyEnv) pay(key, order string, cents int64, card string) string {
	m.t.Helper()
	form := url.Values{"amount": {fmt.Sprint(cents)}, "currency": {"usd"}}
	if order != "" {
		form.Set("metadata[order_id]", order)
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

// order records an order and, with pid, its payment.
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
	if _, err := m.db.Exec(ctx, `INSERT INTO payments (id, order_id, provider, amount_cents, status, refunded_cents, created_at, updated_at)
		VALUES ($1, $2, 'sim', $3, $4, $5, now(), now())`, pid, id, cents, pstatus, refunded); err != nil {
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
	m.order("M.2", "expired", 1000, "", "")
	m.pay(moneyKey, "M.3", 1000, paysim.CardVisa) // no such order in the record (a restore lost it)
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

func jsonDecode(res *http.Response, v any) error { return json.NewDecoder(res.Body).Decode(v) }

package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	stripe "github.com/stripe/stripe-go/v85"

	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/paysim"
)

// paid reserves one unit of item as user and pays it with card on the hosted page, waiting
// until the shop records it paid; it returns the order and its PaymentIntent.
func (a *payAPI) paid(item, user, card string) (string, string) {
	a.t.Helper()
	o := a.reserve(item, user)
	p := a.checkout(user, o)
	a.pay(p["checkout_url"].(string), card)
	waitFor(a.t, "the order to be paid", 30*time.Second, func() bool { return a.status(user, o) == "paid" })
	return o, a.session(p["id"].(string)).PaymentIntent.ID
}

// paymentStatus is the order's payment_status as its shopper sees it.
func (a *payAPI) paymentStatus(user, order string) string {
	a.t.Helper()
	r := a.do("GET", "/api/orders/"+order, a.token(user), nil)
	o, _ := r.Body["order"].(map[string]any)
	s, _ := o["payment_status"].(string)
	return s
}

// refundAtProvider refunds amount cents (0: in full) of pi at the simulator, as the shop's
// staff would in the provider's dashboard.
func (a *payAPI) refundAtProvider(pi string, amount int64) {
	a.t.Helper()
	p := &stripe.RefundCreateParams{PaymentIntent: stripe.String(pi)}
	if amount > 0 {
		p.Amount = stripe.Int64(amount)
	}
	if _, err := a.stripe.V1Refunds.Create(context.Background(), p); err != nil {
		a.t.Fatalf("refund %s at the provider: %v", pi, err)
	}
}

// refundsAt counts the provider's refunds of pi.
func (a *payAPI) refundsAt(pi string) int {
	a.t.Helper()
	n := 0
	for _, err := range a.stripe.V1Refunds.List(context.Background(), &stripe.RefundListParams{PaymentIntent: stripe.String(pi)}).All(context.Background()) {
		if err != nil {
			a.t.Fatal(err)
		}
		n++
	}
	return n
}

// stockLeft is the item's stock_left as its hash in Redis holds it.
func (a *payAPI) stockLeft(item string) int64 {
	a.t.Helper()
	v, err := a.rdb.HGet(context.Background(), a.keys.Item(item).Hash(), "stock_left").Int64()
	if err != nil {
		a.t.Fatal(err)
	}
	return v
}

// TestRefundMadeAtProvider: charge.refunded in full makes a paid order refunded (order.refunded
// once, whatever the duplicates); a partial refund leaves it paid and publishes payment.refunded
// with the amount.
func TestRefundMadeAtProvider(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 3, ReorderWindow: 30 * time.Millisecond}}, nil)
	a.item("rf", 10, 5)
	full, fullPI := a.paid("rf", "alice", paysim.CardVisa)
	part, partPI := a.paid("rf", "bob", paysim.CardVisa)
	left := a.stockLeft("rf")

	// order.paid carries the PaymentIntent and the attempt, for the record's payments row.
	entries, err := a.rdb.XRange(context.Background(), a.keys.Item("rf").Outbox(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Values["type"] == "order.paid" && e.Values["order"] == full {
			if att, _ := e.Values["attempt"].(string); e.Values["payment_intent"] != fullPI || !strings.HasPrefix(att, "fsa_") {
				t.Fatalf("order.paid %v: want payment_intent %s and the attempt", e.Values, fullPI)
			}
		}
	}
	a.refundAtProvider(fullPI, 0)
	a.refundAtProvider(partPI, 500)
	waitFor(t, "the order to be refunded", 30*time.Second, func() bool { return a.status("alice", full) == "refunded" })
	a.delivered()
	if st := a.paymentStatus("alice", full); st != "refunded" {
		t.Fatalf("payment_status of a refunded order: %q", st)
	}
	if s := a.status("bob", part); s != "paid" {
		t.Fatalf("a partial refund made the order %s", s)
	}
	n, _ := a.outboxTypes("rf")
	if n["order.refunded"] != 1 || n["payment.refunded"] < 1 {
		t.Fatalf("events %v: want order.refunded once and payment.refunded for the partial refund", n)
	}
	if got := a.stockLeft("rf"); got != left {
		t.Fatalf("a refund without restock changed stock_left %d -> %d", left, got)
	}
	// An admin refund of the order refunded at the provider is refused: it is not paid.
	if r := a.do("POST", "/api/admin/orders/"+full+"/refund", testAdminToken, nil, "Idempotency-Key", "k1"); r.Status != http.StatusConflict || r.code() != "invalid_state" {
		t.Fatalf("admin refund of a refunded order: %d %s", r.Status, r.Raw)
	}
}

// TestDisputeFlagged: a disputed charge flags the order's payment disputed (payment.disputed
// once), and the provider refuses its refund: 502 payment_refused, the order stays paid.
func TestDisputeFlagged(t *testing.T) {
	a := newPayAPI(t, paysim.Config{DisputeDelay: 100 * time.Millisecond, Chaos: paysim.Chaos{Duplicates: 3}}, nil)
	a.item("dp", 10, 5)
	o, _ := a.paid("dp", "alice", paysim.CardDispute)
	waitFor(t, "the dispute", 30*time.Second, func() bool { return a.paymentStatus("alice", o) == "disputed" })
	a.delivered()
	if s := a.status("alice", o); s != "paid" {
		t.Fatalf("a disputed order is %s", s)
	}
	n, _ := a.outboxTypes("dp")
	if n["payment.disputed"] != 1 {
		t.Fatalf("events %v: want payment.disputed once", n)
	}
	r := a.do("POST", "/api/admin/orders/"+o+"/refund", testAdminToken, nil, "Idempotency-Key", "k1")
	if r.Status != http.StatusBadGateway || r.code() != "payment_refused" {
		t.Fatalf("refund of a disputed order: %d %s", r.Status, r.Raw)
	}
	if s := a.status("alice", o); s != "paid" {
		t.Fatalf("after a refused refund the order is %s", s)
	}
}

// TestAdminRefundContract: every answer of POST /api/admin/orders/{id}/refund.
func TestAdminRefundContract(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	a.item("ar", 10, 1)
	o, pi := a.paid("ar", "alice", paysim.CardVisa)
	reserved := a.reserve("ar", "bob")
	path := "/api/admin/orders/" + o + "/refund"
	for _, tc := range []struct {
		name, path, token, key string
		body                   any
		status                 int
		code                   string
	}{
		{"shopper token", path, a.token("alice"), "k", nil, 403, "forbidden"},
		{"no key", path, testAdminToken, "", nil, 400, "invalid_request"},
		{"unknown field", path, testAdminToken, "k", map[string]any{"restok": true}, 400, "invalid_request"},
		{"unknown order", "/api/admin/orders/ar.999999/refund", testAdminToken, "k", nil, 404, "not_found"},
		{"not paid", "/api/admin/orders/" + reserved + "/refund", testAdminToken, "k", nil, 409, "invalid_state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h []string
			if tc.key != "" {
				h = []string{"Idempotency-Key", tc.key}
			}
			r := a.do("POST", tc.path, tc.token, tc.body, h...)
			if r.Status != tc.status || r.code() != tc.code {
				t.Fatalf("%d %s, want %d %s", r.Status, r.Raw, tc.status, tc.code)
			}
		})
	}
	left := a.stockLeft("ar")
	r := a.do("POST", path, testAdminToken, map[string]any{"restock": true}, "Idempotency-Key", "refund-1")
	if r.Status != 200 || r.Body["order"].(map[string]any)["status"] != "refunded" {
		t.Fatalf("refund: %d %s", r.Status, r.Raw)
	}
	again := a.do("POST", path, testAdminToken, map[string]any{"restock": true}, "Idempotency-Key", "refund-1")
	if again.Status != 200 || again.Body["order"].(map[string]any)["status"] != "refunded" {
		t.Fatalf("the same key again: %d %s", again.Status, again.Raw)
	}
	if other := a.do("POST", path, testAdminToken, nil, "Idempotency-Key", "refund-2"); other.Status != 409 {
		t.Fatalf("another key after the refund: %d %s", other.Status, other.Raw)
	}
	a.delivered()
	if got := a.stockLeft("ar"); got != left+1 {
		t.Fatalf("restocked refund: stock_left %d, want %d", got, left+1)
	}
	if n := a.refundsAt(pi); n != 1 {
		t.Fatalf("%d refunds at the provider, want 1", n)
	}
	// The allowance came back: alice (limit 1) may buy again.
	if r := a.do("POST", "/api/items/ar/purchase", a.token("alice"), map[string]any{"quantity": 1}); r.Status != http.StatusCreated {
		t.Fatalf("purchase after a restocked refund: %d %s", r.Status, r.Raw)
	}
	n, _ := a.outboxTypes("ar")
	if n["order.refunded"] != 1 {
		t.Fatalf("events %v: want order.refunded once", n)
	}
}

// TestAdminRefundRacesWebhooks: admins refunding with the same and different keys at once, while
// the provider delivers its charge.refunded several times: the order is refunded exactly once,
// at the provider and in the events.
func TestAdminRefundRacesWebhooks(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 5, ReorderWindow: 20 * time.Millisecond}}, nil)
	a.item("rr", 100, 5)
	const orders = 4
	type paidOrder struct{ id, pi string }
	var list []paidOrder
	for i := range orders {
		o, pi := a.paid("rr", "u"+strconv.Itoa(i), paysim.CardVisa)
		list = append(list, paidOrder{o, pi})
	}
	var wg sync.WaitGroup
	for _, po := range list {
		for k := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := "race-" + strconv.Itoa(k%2) // two keys, each sent twice
				r := a.do("POST", "/api/admin/orders/"+po.id+"/refund", testAdminToken, map[string]any{"restock": true}, "Idempotency-Key", key)
				if r.Status != 200 && r.Status != 409 && r.Status != 503 {
					t.Errorf("refund %s: %d %s", po.id, r.Status, r.Raw)
				}
			}()
		}
	}
	wg.Wait()
	a.delivered()
	n, _ := a.outboxTypes("rr")
	if n["order.refunded"] != orders {
		t.Fatalf("events %v: want order.refunded once per order (%d)", n, orders)
	}
	for i, po := range list {
		if s := a.status("u"+strconv.Itoa(i), po.id); s != "refunded" {
			t.Errorf("order %s is %s", po.id, s)
		}
		if c := a.refundsAt(po.pi); c != 1 {
			t.Errorf("%d refunds of %s at the provider", c, po.pi)
		}
	}
	if got := a.stockLeft("rr"); got != 100 {
		t.Fatalf("stock_left %d after every order was refunded with restock, want 100", got)
	}
}

// TestPaymentAmountMismatchRefunded: a succeeded payment of the order's attempt in another
// amount than the order's does not pay it: it is refunded once (payment.refunded), counted as
// a mismatch, and the order stays reserved.
func TestPaymentAmountMismatchRefunded(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 3}}, nil)
	a.item("mm", 10, 5)
	o := a.reserve("mm", "alice")
	p := a.checkout("alice", o)
	pid := p["id"].(string)
	md := a.session(pid).Metadata
	mismatches := testutil.ToFloat64(metrics.PaymentWebhooks.WithLabelValues(payment.WebhookMismatch))

	ctx := context.Background()
	params := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(1), Currency: stripe.String("usd"), Metadata: md}
	pi, err := a.stripe.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.stripe.V1PaymentIntents.Confirm(ctx, pi.ID, &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String(paysim.CardVisa)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refund", 30*time.Second, func() bool {
		_, pay := a.outboxTypes("mm")
		return pay[pid] == "payment.refunded"
	})
	a.delivered()
	n, _ := a.outboxTypes("mm")
	if n["order.paid"] != 0 || n["payment.refunded"] != 1 || a.status("alice", o) != "reserved" {
		t.Fatalf("events %v, order %s", n, a.status("alice", o))
	}
	if c := a.refundsAt(pi.ID); c != 1 {
		t.Fatalf("%d refunds at the provider, want 1", c)
	}
	if got := testutil.ToFloat64(metrics.PaymentWebhooks.WithLabelValues(payment.WebhookMismatch)) - mismatches; got < 1 {
		t.Fatalf("mismatch counted %v times", got)
	}
}

// TestDisputesRoute: GET /api/admin/payments/disputes is an admin's and takes no parameters.
func TestDisputesRoute(t *testing.T) {
	a := newTestAPI(t, nil)
	if r := a.do("GET", "/api/admin/payments/disputes", a.token("alice"), nil); r.Status != http.StatusForbidden {
		t.Fatalf("shopper: %d %s", r.Status, r.Raw)
	}
	if r := a.do("GET", "/api/admin/payments/disputes?limit=5", testAdminToken, nil); r.Status != http.StatusBadRequest || r.code() != "invalid_request" {
		t.Fatalf("a parameter: %d %s", r.Status, r.Raw)
	}
	if r := a.do("GET", "/api/admin/payments/disputes", testAdminToken, nil); r.Status != http.StatusOK && r.Status != http.StatusServiceUnavailable {
		t.Fatalf("admin: %d %s", r.Status, r.Raw)
	}
}

// TestRefundLeavesBestSellers: a refunded buyer no longer counts on best sellers, whether the
// refund restocked the units or left them sold, nor as a buyer who may rate; the item's other
// buyers still count. The board follows the figure down as well as up.
func TestRefundLeavesBestSellers(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	a.item("bs", 10, 5)
	a.item("bt", 10, 5)
	kept, _ := a.paid("bs", "alice", paysim.CardVisa)
	restocked, _ := a.paid("bs", "bob", paysim.CardVisa)
	a.paid("bs", "carol", paysim.CardVisa)
	a.paid("bt", "dave", paysim.CardVisa)
	a.paid("bt", "dave", paysim.CardVisa)
	ctx := context.Background()
	board := func() map[string]float64 {
		es, err := a.srv.Ranking.BestSellers(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, e := range es {
			out[e.ItemID] = e.Score
		}
		return out
	}
	waitFor(t, "best sellers bs 3, bt 2", 10*time.Second, func() bool { b := board(); return b["bs"] == 3 && b["bt"] == 2 })

	for _, c := range []struct {
		order   string
		restock bool
		want    float64
	}{{kept, false, 2}, {restocked, true, 1}} {
		r := a.do("POST", "/api/admin/orders/"+c.order+"/refund", testAdminToken, map[string]any{"restock": c.restock}, "Idempotency-Key", "k-"+c.order)
		if r.Status != http.StatusOK {
			t.Fatalf("refund %s: %d %s", c.order, r.Status, r.Raw)
		}
		waitFor(t, "best sellers after a refund", 10*time.Second, func() bool { return board()["bs"] == c.want })
	}
	a.delivered()
	if b := board(); b["bs"] != 1 || b["bt"] != 2 {
		t.Fatalf("best sellers after the refunds and their charge.refunded: %v", b)
	}
	if left := a.stockLeft("bs"); left != 8 {
		t.Fatalf("stock_left %d: the restocked refund's unit is back on sale, the other stays sold", left)
	}
	for user, want := range map[string]int{"alice": http.StatusConflict, "bob": http.StatusConflict, "carol": http.StatusOK} {
		if r := a.do("POST", "/api/items/bs/rating", a.token(user), map[string]any{"stars": 4}); r.Status != want {
			t.Fatalf("%s rates: %d %s", user, r.Status, r.Raw)
		}
	}
}

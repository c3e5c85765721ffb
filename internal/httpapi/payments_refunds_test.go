package httpapi_test

import (
	"context"
	"crypto/rand"
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

// forgetPayment wipes what links the order to its checkout session (its payment record and
// the session's index), as losing them does while the shopper's checkout page stays open.
// The attempt's index stays: it is this deployment's record that the payment is the shop's
// (a restore brings it back from the record).
func (a *payAPI) forgetPayment(item, order, session string) {
	a.t.Helper()
	ctx := context.Background()
	rec, err := a.rdb.HGet(ctx, a.keys.Item(item).Payments(), order).Result()
	if err != nil {
		a.t.Fatalf("payment record of %s: %v", order, err)
	}
	f := strings.Split(rec, "|")
	att := f[len(f)-1]
	if !strings.HasPrefix(att, "fsa_") {
		a.t.Fatalf("payment record %q names no attempt", rec)
	}
	if err := a.rdb.HDel(ctx, a.keys.Item(item).Payments(), order).Err(); err != nil {
		a.t.Fatal(err)
	}
	if err := a.rdb.Del(ctx, a.keys.PaymentOrder(session)).Err(); err != nil {
		a.t.Fatal(err)
	}
	if oid, err := a.rdb.Get(ctx, a.keys.PaymentOrder(att)).Result(); err != nil || oid != order {
		a.t.Fatalf("attempt %s indexed to %q (%v), want %s", att, oid, err, order)
	}
}

// refundsOf counts the provider's refunds of a PaymentIntent, checking each is of cents.
func (a *payAPI) refundsOf(pi string, cents int64) int {
	a.t.Helper()
	n := 0
	for r, err := range a.stripe.V1Refunds.List(context.Background(), &stripe.RefundListParams{PaymentIntent: stripe.String(pi)}).All(context.Background()) {
		if err != nil {
			a.t.Fatal(err)
		}
		if r.Amount != cents {
			a.t.Errorf("refund of %d, want %d", r.Amount, cents)
		}
		n++
	}
	return n
}

// TestLostLinkPaymentRefunded: a payment the api lost its link to, whose order can no longer
// be paid (cancelled meanwhile), is found by its metadata and refunded exactly once under
// duplicated webhooks; the order stays cancelled.
func TestLostLinkPaymentRefunded(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 3}}, nil)
	a.item("ol", 10, 5)
	o := a.reserve("ol", "alice")
	p := a.checkout("alice", o)
	sid := p["id"].(string)
	a.forgetPayment("ol", o, sid)
	if r := a.do("POST", "/api/orders/"+o+"/cancel", a.token("alice"), nil); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	a.pay(p["checkout_url"].(string), paysim.CardVisa)
	pi := a.session(sid).PaymentIntent.ID
	waitFor(t, "the refund", 30*time.Second, func() bool { return a.refundsOf(pi, 1999) > 0 })
	a.delivered()
	if n := a.refundsOf(pi, 1999); n != 1 {
		t.Fatalf("%d refunds at the provider, want 1", n)
	}
	n, _ := a.outboxTypes("ol")
	if n["order.paid"] != 0 || a.status("alice", o) != "cancelled" {
		t.Fatalf("events %v, order %s", n, a.status("alice", o))
	}
}

// TestLostLinkPaymentAttached: a payment the api lost its link to, whose order is still
// reserved, is attached by its metadata and pays the order, once, with no refund.
func TestLostLinkPaymentAttached(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 3}}, nil)
	a.item("oa", 10, 5)
	o := a.reserve("oa", "alice")
	p := a.checkout("alice", o)
	sid := p["id"].(string)
	a.forgetPayment("oa", o, sid)
	a.pay(p["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the order paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
	a.delivered()
	pi := a.session(sid).PaymentIntent.ID
	if n := a.refundsOf(pi, 1999); n != 0 {
		t.Fatalf("%d refunds of the payment that paid the order", n)
	}
	n, pay := a.outboxTypes("oa")
	if n["order.paid"] != 1 || pay[sid] != "order.paid" || n["payment.refunded"] != 0 {
		t.Fatalf("events %v, payments %v", n, pay)
	}
}

// TestLostLinkOldSessionRefunded: after the link was lost the shopper opened the checkout
// again (a new attempt in force); paying the old page too refunds the old payment once, and
// the new session still pays the order.
func TestLostLinkOldSessionRefunded(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 3}}, nil)
	a.item("or", 10, 5)
	o := a.reserve("or", "alice")
	old := a.checkout("alice", o)
	oldID := old["id"].(string)
	a.forgetPayment("or", o, oldID)
	now := a.checkout("alice", o)
	if now["id"] == oldID {
		t.Fatalf("the checkout after the lost link answered the old session %s", oldID)
	}
	a.pay(old["checkout_url"].(string), paysim.CardVisa)
	oldPI := a.session(oldID).PaymentIntent.ID
	waitFor(t, "the old payment's refund", 30*time.Second, func() bool { return a.refundsOf(oldPI, 1999) > 0 })
	if st := a.status("alice", o); st != "reserved" {
		t.Fatalf("order %s after the old page was paid, want reserved", st)
	}
	a.pay(now["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the order paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
	a.delivered()
	if n := a.refundsOf(oldPI, 1999); n != 1 {
		t.Fatalf("%d refunds of the old payment, want 1", n)
	}
	if n := a.refundsOf(a.session(now["id"].(string)).PaymentIntent.ID, 1999); n != 0 {
		t.Fatalf("%d refunds of the payment that paid the order", n)
	}
	n, pay := a.outboxTypes("or")
	if n["order.paid"] != 1 || pay[now["id"].(string)] != "order.paid" {
		t.Fatalf("events %v, payments %v", n, pay)
	}
}

// foreignPayment pays, on the shop's own account, a Checkout Session the shop never made whose
// metadata names order of user with an attempt this deployment never recorded (as another
// deployment's, or the shop's other sales', may), for cents; it returns the session.
func (a *payAPI) foreignPayment(order, user string, cents int64) *stripe.CheckoutSession {
	a.t.Helper()
	return a.paidElsewhere(map[string]string{"order_id": order, "user_id": user, "flashsale_attempt": "fsa_" + rand.Text()}, cents)
}

// paidElsewhere pays, on the shop's own account, a Checkout Session the shop never made, with
// md as its and its PaymentIntent's metadata (nil: none), for cents; it returns the session.
func (a *payAPI) paidElsewhere(md map[string]string, cents int64) *stripe.CheckoutSession {
	a.t.Helper()
	p := &stripe.CheckoutSessionCreateParams{
		Mode: stripe.String(string(stripe.CheckoutSessionModePayment)),
		LineItems: []*stripe.CheckoutSessionCreateLineItemParams{{
			Quantity: stripe.Int64(1),
			PriceData: &stripe.CheckoutSessionCreateLineItemPriceDataParams{
				Currency: stripe.String("usd"), UnitAmount: stripe.Int64(cents),
				ProductData: &stripe.CheckoutSessionCreateLineItemPriceDataProductDataParams{Name: stripe.String("elsewhere")},
			},
		}},
		SuccessURL:        stripe.String("http://elsewhere.test/ok"),
		CancelURL:         stripe.String("http://elsewhere.test/no"),
		Metadata:          md,
		PaymentIntentData: &stripe.CheckoutSessionCreatePaymentIntentDataParams{Metadata: md},
	}
	cs, err := a.stripe.V1CheckoutSessions.Create(context.Background(), p)
	if err != nil {
		a.t.Fatal(err)
	}
	a.pay(cs.URL, paysim.CardVisa)
	return a.session(cs.ID)
}

// TestForeignPaymentLeftAlone: a succeeded payment naming a real reservation of this shop but
// an attempt this deployment never recorded is not the shop's: answered 200 and counted
// unknown, never paid onto the order nor refunded, with or without an open checkout; the
// shop's own checkout still pays the order.
func TestForeignPaymentLeftAlone(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 2}}, nil)
	a.item("fp", 10, 5)
	bare := a.reserve("fp", "alice")
	open := a.reserve("fp", "bob")
	mine := a.checkout("bob", open)
	unknown := func() float64 {
		return testutil.ToFloat64(metrics.PaymentWebhooks.WithLabelValues(payment.WebhookUnknown))
	}
	before := unknown()

	foreign := []*stripe.CheckoutSession{a.foreignPayment(bare, "alice", 1999), a.foreignPayment(open, "bob", 1999)}
	a.delivered()
	for _, cs := range foreign {
		if cs.PaymentIntent == nil || cs.PaymentIntent.ID == "" {
			t.Fatalf("foreign session %s has no payment", cs.ID)
		}
		if n := a.refundsOf(cs.PaymentIntent.ID, 1999); n != 0 {
			t.Errorf("%d refunds of another deployment's payment %s", n, cs.PaymentIntent.ID)
		}
	}
	if st := a.status("alice", bare); st != "reserved" {
		t.Errorf("order without checkout %s after a foreign payment, want reserved", st)
	}
	if st := a.status("bob", open); st != "reserved" {
		t.Errorf("order with an open checkout %s after a foreign payment, want reserved", st)
	}
	// Each foreign payment's success events (the session's and its PaymentIntent's).
	if got := unknown() - before; got < 2 {
		t.Errorf("%v deliveries counted unknown, want at least 2", got)
	}
	if n, _ := a.outboxTypes("fp"); n["order.paid"] != 0 || n["payment.refunded"] != 0 {
		t.Fatalf("events %v after foreign payments", n)
	}

	a.pay(mine["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the shop's own payment", 30*time.Second, func() bool { return a.status("bob", open) == "paid" })
	a.delivered()
	if n := a.refundsOf(a.session(mine["id"].(string)).PaymentIntent.ID, 1999); n != 0 {
		t.Fatalf("%d refunds of the payment that paid the order", n)
	}
	for _, cs := range foreign {
		if n := a.refundsOf(cs.PaymentIntent.ID, 1999); n != 0 {
			t.Fatalf("%d refunds of another deployment's payment %s", n, cs.PaymentIntent.ID)
		}
	}
}

// TestOtherSalesOnTheAccount: the account's sales that are not flashsale's (no flashsale
// metadata) are answered 200 and counted foreign, not unknown, so they raise no alert; a
// payment carrying flashsale's metadata that this deployment never recorded is still unknown.
func TestOtherSalesOnTheAccount(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	a.item("os", 10, 5)
	bare := a.reserve("os", "alice")
	count := func(result string) float64 {
		return testutil.ToFloat64(metrics.PaymentWebhooks.WithLabelValues(result))
	}
	foreign, unknown := count(payment.WebhookForeign), count(payment.WebhookUnknown)

	other := a.paidElsewhere(nil, 2500)
	a.delivered()
	// The session's success and its PaymentIntent's, at least.
	if got := count(payment.WebhookForeign) - foreign; got < 2 {
		t.Errorf("%v deliveries of another sale counted foreign, want at least 2", got)
	}
	if got := count(payment.WebhookUnknown) - unknown; got != 0 {
		t.Errorf("%v deliveries of another sale counted unknown, want 0", got)
	}
	if n := a.refundsOf(other.PaymentIntent.ID, 2500); n != 0 {
		t.Errorf("%d refunds of another sale's payment", n)
	}

	a.foreignPayment(bare, "alice", 1999)
	a.delivered()
	if got := count(payment.WebhookUnknown) - unknown; got < 2 {
		t.Errorf("%v deliveries of an unrecorded flashsale attempt counted unknown, want at least 2", got)
	}
	if st := a.status("alice", bare); st != "reserved" {
		t.Errorf("order %s after payments made elsewhere, want reserved", st)
	}
	if n, _ := a.outboxTypes("os"); n["order.paid"] != 0 || n["payment.refunded"] != 0 {
		t.Fatalf("events %v after payments made elsewhere", n)
	}
}

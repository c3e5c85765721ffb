//go:build faults

package faults

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v85"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/paysim"
	"github.com/flashsale/flashsale/internal/testing/testenv/procs"
)

const stormSecret = "whsec_faults-storm-0123456789abcdef0123456789"

const stormKey = "sk_test_faults-storm-0123456789"

// TestWebhookStorm is the payment row: 1,300 shoppers buy and pay through the simulator and two
// apis, which get every event 1-5 times, reordered; 15% pay with pm_card_async, which succeeds
// after the reservation expired. Each succeeded payment is then one paid order or one refund,
// none twice, and Postgres agrees (with a clean batch reconciliation).
func TestWebhookStorm(t *testing.T) {
	const (
		shoppers = 1300
		nItems   = 10
		// Long enough for a good card's webhook to arrive through the storm on a busy machine
		// (race-built apis on two shared cores answer a webhook in up to a second), short enough
		// that the test waits little for the async payments.
		ttl   = 45 * time.Second
		async = 55 * time.Second // > ttl: every async payment succeeds after its reservation ended
	)
	// The simulator delivers to a relay of the test's own that spreads the deliveries over the
	// apis (the apis are started after the simulator, on ports chosen then).
	var apis atomic.Pointer[[]string]
	relay := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list := *apis.Load()
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), "POST", list[rand.IntN(len(list))]+"/api/payments/webhook", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", r.Header.Get("Stripe-Signature"))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		w.WriteHeader(res.StatusCode)
	})}
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apis.Store(&[]string{})
	go func() { _ = relay.Serve(rl) }()
	defer relay.Close()

	sim := paysim.New(paysim.Config{
		APIKey:     stormKey,
		WebhookURL: "http://" + rl.Addr().String() + "/", WebhookSecrets: []string{stormSecret},
		AsyncDelay: async, RetryMin: 100 * time.Millisecond, RetryMax: 2 * time.Second, Workers: 64,
		Chaos: paysim.Chaos{Duplicates: 5, ReorderWindow: 300 * time.Millisecond},
	})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer sim.Close()

	payEnv := []string{"FLASHSALE_PAYMENT_PROVIDER=sim", "FLASHSALE_PAYMENT_SIM_ADDR=" + sim.Addr(), "FLASHSALE_PAYMENT_SIM_API_KEY=" + stormKey,
		"FLASHSALE_PAYMENT_WEBHOOK_SECRET=" + stormSecret,
		// No processing hold: every async payment succeeds after its reservation ended, and
		// is refunded (the hold has its own tests in internal/httpapi).
		"FLASHSALE_PAYMENT_PROCESSING_HOLD=0s"}
	s := newSale(t, saleOptions{reservationTTL: ttl, extraEnv: payEnv})
	s.startAPI()
	s.startAPI()
	apis.Store(&[]string{s.apis[0].URL, s.apis[1].URL})
	s.startReconciler()

	items := map[string]int{}
	var ids []string
	for i := range nItems {
		id := "storm" + strconv.Itoa(i)
		s.shop.PutItem(id, shoppers/nItems, 1)
		items[id] = 1
		ids = append(ids, id)
	}
	users := s.login("st", shoppers)
	sc := stripe.NewClient(stormKey, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(sim.URL()), MaxNetworkRetries: stripe.Int64(2), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
	ctx := context.Background()

	type purchase struct {
		order, pid string
		async      bool
	}
	var mu sync.Mutex
	var bought []purchase
	var checkoutLat []time.Duration
	idx := make([]int, shoppers)
	for i := range idx {
		idx[i] = i
	}
	procs.Parallel(24, idx, func(i int) {
		u := users[i]
		c := s.shop.Buy(procs.Any, u, ids[i%len(ids)], "k-"+u)
		if c.Status != 201 {
			return
		}
		start := time.Now()
		status, out, err := s.shop.JSON(procs.Any, "POST", "/api/orders/"+c.OrderID+"/checkout", s.shop.Token(u), "", nil)
		took := time.Since(start)
		if err != nil || status != 200 {
			t.Errorf("checkout %s: %d %v %v", c.OrderID, status, out, err)
			return
		}
		pay, _ := out["payment"].(map[string]any)
		pid, _ := pay["id"].(string)
		page, _ := pay["checkout_url"].(string)
		p := purchase{order: c.OrderID, pid: pid, async: i%100 < 15}
		if i%10 == 3 { // a declined card first: nothing changes, the shopper tries again
			if back, err := paysim.PaySession(ctx, page, paysim.CardDeclined); err != nil || !strings.HasSuffix(page, back) {
				t.Errorf("declined card for %s: back to %q, %v", pid, back, err)
			}
		}
		card := paysim.CardVisa
		if p.async {
			card = paysim.CardAsync
		}
		if _, err := paysim.PaySession(ctx, page, card); err != nil {
			t.Errorf("paying %s with %s: %v", pid, card, err)
			return
		}
		mu.Lock()
		bought = append(bought, p)
		checkoutLat = append(checkoutLat, took)
		mu.Unlock()
	})
	if t.Failed() {
		t.FailNow()
	}

	// Every payment settles (async ones after the delay) and every delivery is answered 2xx.
	for _, b := range bought {
		s.waitFor("payment "+b.pid+" succeeded", 2*time.Minute, func() bool { return settled(ctx, sc, b.pid) })
	}
	s.waitFor("every webhook delivered", 2*time.Minute, func() bool {
		st := sim.Stats()
		return st.Pending == 0 && st.Delivered >= st.Events
	})
	s.waitNoReservations(items, 2*ttl+time.Minute)

	// Redis: each payment's record beside its order, the order's status, and the provider's refunds.
	var paid, refunded, lateAsyncPaid int
	orderPaidBy := map[string]string{}
	for _, b := range bought {
		item, _ := keyspace.ItemOfOrder(b.order)
		rec, err := s.rdb.HGet(ctx, s.keys().Item(item).Payments(), b.order).Result()
		if err != nil {
			t.Fatalf("payment record of %s: %v", b.order, err)
		}
		recPID, rest, _ := strings.Cut(rec, "|")
		state, _, _ := strings.Cut(rest, "|")
		packed, _ := s.rdb.HGet(ctx, s.keys().Item(item).Orders(), b.order).Result()
		o, err := procs.ParseOrder(b.order, item, packed)
		if err != nil {
			t.Fatal(err)
		}
		if recPID != b.pid {
			t.Errorf("order %s has payment %q, checkout answered %s", b.order, recPID, b.pid)
		}
		refunds := countRefunds(ctx, t, sc, b.pid)
		switch state {
		case "paid":
			paid++
			if o.Status != "paid" || refunds != 0 {
				t.Errorf("payment %s paid order %s (%s) and has %d refunds", b.pid, b.order, o.Status, refunds)
			}
			if prev, ok := orderPaidBy[b.order]; ok {
				t.Errorf("order %s paid by %s and %s", b.order, prev, b.pid)
			}
			orderPaidBy[b.order] = b.pid
			if b.async {
				lateAsyncPaid++
			}
		case "refunded":
			refunded++
			if o.Status != "expired" && o.Status != "cancelled" || refunds != 1 {
				t.Errorf("refunded payment %s: order %s is %s, %d refunds at the provider", b.pid, b.order, o.Status, refunds)
			}
		default:
			t.Errorf("payment %s of %s ends %q, neither paid nor refunded", b.pid, b.order, rec)
		}
	}
	if lateAsyncPaid > 0 {
		t.Errorf("%d async payments that succeeded after their reservation ended paid their order", lateAsyncPaid)
	}
	if paid < 1000 {
		t.Errorf("only %d paid purchases (the row needs 1,000)", paid)
	}
	// The outbox events were published: Postgres has each payment as Redis does.
	ledger := procs.CheckRedis(t, s.rdb, s.keys(), items)
	procs.WaitPostgres(t, s.db, ledger.Orders, 2*time.Minute)
	s.waitFor("Postgres payments", 2*time.Minute, func() bool {
		var succ, ref int
		err := s.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'refunded') FROM payments`).Scan(&succ, &ref)
		return err == nil && succ == paid && ref == refunded
	})
	var mismatched int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM payments p JOIN orders o ON o.id = p.order_id
		WHERE (p.status = 'succeeded') <> (o.status = 'paid')`).Scan(&mismatched); err != nil {
		t.Fatal(err)
	}
	if mismatched != 0 {
		t.Errorf("Postgres: %d payments whose status disagrees with their order", mismatched)
	}
	procs.ReconcileBatch(t, bins.Reconciler, s.env)

	st := sim.Stats()
	sort.Slice(checkoutLat, func(i, j int) bool { return checkoutLat[i] < checkoutLat[j] })
	q := func(p float64) time.Duration { return checkoutLat[int(p*float64(len(checkoutLat)-1))] }
	t.Logf("| webhook storm | %d purchases paid through the simulator | %d paid | %d refunded (late async) | %d events, %d deliveries (%d attempts) | 0 paid twice | 0 refunds of paid orders | checkout p50 %s p99 %s |",
		len(bought), paid, refunded, st.Events, st.Delivered, st.Attempts, q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond))
	report(t, "webhook storm (payments)", figures{calls: len(s.shop.Calls()), created: len(bought)})
}

// settled reports whether the session's payment reached succeeded at the provider.
func settled(ctx context.Context, sc *stripe.Client, sid string) bool {
	cs, err := sc.V1CheckoutSessions.Retrieve(ctx, sid, nil)
	if err != nil || cs.PaymentIntent == nil {
		return false
	}
	pi, err := sc.V1PaymentIntents.Retrieve(ctx, cs.PaymentIntent.ID, nil)
	return err == nil && pi.Status == stripe.PaymentIntentStatusSucceeded
}

// countRefunds is how many refunds the provider made of the session's payment.
func countRefunds(ctx context.Context, t *testing.T, sc *stripe.Client, sid string) int {
	cs, err := sc.V1CheckoutSessions.Retrieve(ctx, sid, nil)
	if err != nil || cs.PaymentIntent == nil {
		t.Fatalf("session %s: %v", sid, err)
	}
	pid := cs.PaymentIntent.ID
	n := 0
	for _, err := range sc.V1Refunds.List(ctx, &stripe.RefundListParams{PaymentIntent: stripe.String(pid)}).All(ctx) {
		if err != nil {
			t.Fatalf("refunds of %s: %v", pid, err)
		}
		n++
	}
	return n
}

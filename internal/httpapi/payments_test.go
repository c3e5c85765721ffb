package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	stripe "github.com/stripe/stripe-go/v85"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/paysim"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

const paySecret = "whsec_payment-test-0123456789abcdef0123456789"

// paySimKey is the shop's key at the test simulator.
const paySimKey = "sk_test_payment-test-0123456789"

// payAPI is an api taking payment through a simulator of the test's own: the api runs (Run,
// so its expirer and payment canceller work) on a free port, where the simulator delivers
// its webhooks; the api finds the simulator already answering on its address and uses it.
type payAPI struct {
	*testAPI
	sim    *paysim.Server
	stripe *stripe.Client
	url    string
}

func newPayAPI(t *testing.T, simCfg paysim.Config, tweak func(*config.Config)) *payAPI {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	if simCfg.WebhookURL == "" { // else a gate of the test's own, in front of this api
		simCfg.WebhookURL = base + "/api/payments/webhook"
	}
	simCfg.WebhookSecrets = []string{paySecret}
	if simCfg.RetryMin == 0 {
		simCfg.RetryMin, simCfg.RetryMax = 50*time.Millisecond, 500*time.Millisecond
	}
	if simCfg.APIKey == "" {
		simCfg.APIKey = paySimKey
	}
	sim := paysim.New(simCfg)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })

	rdb, keys := testenv.Redis(t)
	cfg, err := config.Parse(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisAddrs = []string{testenv.RedisAddr()}
	cfg.RedisPrefix = keys.Prefix
	cfg.KafkaBrokers = []string{"127.0.0.1:1"} // events stay in the outbox, where the tests read them
	cfg.AdminToken = testAdminToken
	cfg.JWTSecret = "test-secret"
	cfg.LimitPurchase, cfg.LimitPay, cfg.LimitCancel = config.Limit{}, config.Limit{}, config.Limit{}
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.ExpiryInterval = 20 * time.Millisecond
	cfg.Payment.Provider = "sim"
	cfg.Payment.SimAddr = sim.Addr()
	cfg.Payment.WebhookSecrets, cfg.Payment.SecretGenerated = []string{paySecret}, false
	cfg.Payment.SimAPIKey, cfg.Payment.SimKeyGenerated = sim.APIKey(), false
	cfg.Payment.PublicURL = base
	if tweak != nil {
		tweak(&cfg)
	}
	api, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- api.Run(ctx, ln) }()
	t.Cleanup(func() { stop(); <-done; api.Close() })

	a := &testAPI{t: t, rdb: rdb, keys: keys, cfg: cfg, srv: api.Server(), inv: api.Inventory, ord: api.Orders, q: api.Queue}
	a.auth = a.srv.Auth
	sc := stripe.NewClient(sim.APIKey(), stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(sim.URL()), MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
	return &payAPI{testAPI: a, sim: sim, stripe: sc, url: base}
}

// reserve buys one unit of item as user and returns the order id.
func (a *payAPI) reserve(item, user string) string {
	a.t.Helper()
	r := a.do("POST", "/api/items/"+item+"/purchase", a.token(user), map[string]any{"quantity": 1})
	if r.Status != http.StatusCreated {
		a.t.Fatalf("purchase: %d %s", r.Status, r.Raw)
	}
	return r.Body["order"].(map[string]any)["id"].(string)
}

// checkout returns the payment of a successful checkout.
func (a *payAPI) checkout(user, order string) map[string]any {
	a.t.Helper()
	r := a.do("POST", "/api/orders/"+order+"/checkout", a.token(user), nil)
	if r.Status != http.StatusOK {
		a.t.Fatalf("checkout %s: %d %s", order, r.Status, r.Raw)
	}
	return r.Body["payment"].(map[string]any)
}

// pay submits the session's hosted page (checkoutURL) with one of the simulator's test
// cards, as the shopper's browser would, and returns where the page sends the browser.
func (a *payAPI) pay(checkoutURL, card string) string {
	a.t.Helper()
	back, err := paysim.PaySession(context.Background(), checkoutURL, card)
	if err != nil {
		a.t.Fatal(err)
	}
	return back
}

// session is the order's Checkout Session at the simulator, as the shop's key sees it.
func (a *payAPI) session(id string) *stripe.CheckoutSession {
	a.t.Helper()
	cs, err := a.stripe.V1CheckoutSessions.Retrieve(context.Background(), id, nil)
	if err != nil {
		a.t.Fatalf("session %s: %v", id, err)
	}
	return cs
}

// status is the order's status as the shopper sees it.
func (a *payAPI) status(user, order string) string {
	a.t.Helper()
	r := a.do("GET", "/api/orders/"+order, a.token(user), nil)
	o, _ := r.Body["order"].(map[string]any)
	s, _ := o["status"].(string)
	return s
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// outboxTypes counts the outbox events of the item's shard by type, and the payment ids they carry.
func (a *payAPI) outboxTypes(item string) (map[string]int, map[string]string) {
	a.t.Helper()
	entries, err := a.rdb.XRange(context.Background(), a.keys.Item(item).Outbox(), "-", "+").Result()
	if err != nil {
		a.t.Fatal(err)
	}
	n, pay := map[string]int{}, map[string]string{}
	for _, e := range entries {
		typ, _ := e.Values["type"].(string)
		n[typ]++
		if p, ok := e.Values["payment"].(string); ok {
			pay[p] = typ
		}
	}
	return n, pay
}

// delivered waits until the simulator has delivered every event it made.
func (a *payAPI) delivered() {
	a.t.Helper()
	waitFor(a.t, "every webhook delivered", 30*time.Second, func() bool {
		s := a.sim.Stats()
		return s.Pending == 0 && s.Delivered >= s.Events
	})
}

// TestCheckoutContract: every answer of POST /api/orders/{id}/checkout.
func TestCheckoutContract(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	a.item("co", 10, 5)

	o1 := a.reserve("co", "alice")
	p := a.checkout("alice", o1)
	for _, f := range []string{"id", "payment_intent", "provider", "status", "amount_cents", "currency", "client_secret", "checkout_url"} {
		if _, ok := p[f]; !ok {
			t.Errorf("payment lacks %s: %v", f, p)
		}
	}
	if !strings.HasPrefix(p["id"].(string), "cs_") || p["payment_intent"] != nil || p["provider"] != "sim" || p["status"] != "open" ||
		p["amount_cents"] != float64(1999) || p["currency"] != "usd" || p["client_secret"] != nil ||
		p["checkout_url"] != a.sim.URL()+"/c/pay/"+p["id"].(string) {
		t.Fatalf("payment %v", p)
	}
	// Once per order: asking again answers the same payment.
	if again := a.checkout("alice", o1); again["id"] != p["id"] {
		t.Fatalf("second checkout made %v, first %v", again["id"], p["id"])
	}
	r := a.do("GET", "/api/orders/"+o1, a.token("alice"), nil)
	if ro := r.Body["order"].(map[string]any); ro["payment_id"] != p["id"] || ro["payment_status"] != "open" {
		t.Fatalf("order after checkout: %s", r.Raw)
	}
	fresh := a.reserve("co", "alice")
	if r := a.do("GET", "/api/orders/"+fresh, a.token("alice"), nil); !strings.Contains(r.Raw, `"payment_id":null`) || !strings.Contains(r.Raw, `"payment_status":null`) {
		t.Fatalf("order before checkout must say payment_id null: %s", r.Raw)
	}
	if r := a.do("GET", "/api/orders", a.token("alice"), nil); !strings.Contains(r.Raw, `"payment_id":"`+p["id"].(string)+`"`) {
		t.Fatalf("order list lacks the payment id: %s", r.Raw)
	}

	cancelled := a.reserve("co", "alice")
	if r := a.do("POST", "/api/orders/"+cancelled+"/cancel", a.token("alice"), nil); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	for _, c := range []struct {
		name, user, order string
		status            int
		code              string
	}{
		{"another shopper's order", "bob", o1, 404, "not_found"},
		{"unknown order", "alice", "co.999999", 404, "not_found"},
		{"malformed id", "alice", "nope", 404, "not_found"},
		{"cancelled order", "alice", cancelled, 409, "invalid_state"},
	} {
		r := a.do("POST", "/api/orders/"+c.order+"/checkout", a.token(c.user), nil)
		if r.Status != c.status || r.code() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.Status, r.Raw, c.status, c.code)
		}
	}
	if r := a.do("POST", "/api/orders/"+o1+"/checkout", "", nil); r.Status != 401 {
		t.Errorf("no token: %d", r.Status)
	}
	// With a provider, only the provider pays.
	if r := a.do("POST", "/api/orders/"+fresh+"/pay", a.token("alice"), nil); r.Status != 409 || r.code() != "invalid_state" {
		t.Errorf("pay with a provider: %d %s", r.Status, r.Raw)
	}
	if a.status("alice", fresh) != "reserved" {
		t.Error("a refused pay changed the order")
	}
}

// TestCheckoutExpired: a reservation whose time ran out is 409 order_expired.
func TestCheckoutExpired(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, func(c *config.Config) { c.ReservationTTL = 200 * time.Millisecond })
	a.item("ce", 10, 5)
	o := a.reserve("ce", "alice")
	waitFor(t, "the reservation to expire", 10*time.Second, func() bool { return a.status("alice", o) == "expired" })
	r := a.do("POST", "/api/orders/"+o+"/checkout", a.token("alice"), nil)
	if r.Status != 409 || r.code() != "order_expired" {
		t.Fatalf("checkout of an expired order: %d %s", r.Status, r.Raw)
	}
}

// TestCheckoutProviderNone: a shop that settles outside has no checkout; /pay pays.
func TestCheckoutProviderNone(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("cn", 10, 5)
	r := a.do("POST", "/api/items/cn/purchase", a.token("alice"), map[string]any{})
	o := r.Body["order"].(map[string]any)["id"].(string)
	if r := a.do("POST", "/api/orders/"+o+"/checkout", a.token("alice"), nil); r.Status != 409 || r.code() != "invalid_state" {
		t.Fatalf("checkout with provider none: %d %s", r.Status, r.Raw)
	}
	if r := a.do("POST", "/api/orders/"+o+"/pay", a.token("alice"), nil); r.Status != 200 || !strings.Contains(r.Raw, `"payment_id":null`) {
		t.Fatalf("pay with provider none: %d %s", r.Status, r.Raw)
	}
}

// TestCheckoutProviderDown: while the provider cannot be reached, checkout answers 503 and
// nothing changes; once it is back, checkout works.
func TestCheckoutProviderDown(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	a.item("cd", 10, 5)
	o := a.reserve("cd", "alice")
	addr := a.sim.Addr()
	a.sim.Close()
	r := a.do("POST", "/api/orders/"+o+"/checkout", a.token("alice"), nil)
	if r.Status != 503 || r.code() != "unavailable" || !strings.Contains(r.Body["error"].(map[string]any)["message"].(string), "nothing was changed") {
		t.Fatalf("checkout with the provider down: %d %s", r.Status, r.Raw)
	}
	if g := a.do("GET", "/api/orders/"+o, a.token("alice"), nil); !strings.Contains(g.Raw, `"payment_id":null`) || a.status("alice", o) != "reserved" {
		t.Fatalf("a refused checkout changed the order: %s", g.Raw)
	}
	back := paysim.New(paysim.Config{APIKey: a.sim.APIKey(), WebhookURL: a.url + "/api/payments/webhook", WebhookSecrets: []string{paySecret}})
	if err := back.Start(addr); err != nil {
		t.Fatalf("restarting the simulator on %s: %v", addr, err)
	}
	defer back.Close()
	if p := a.checkout("alice", o); p["id"] == "" || p["status"] != "open" {
		t.Fatalf("payment after the provider came back: %v", p)
	}
}

// TestWebhookSignature: unsigned, forged, stale and future-dated deliveries are 400 and change
// nothing; a verified event for an unknown payment is 200 and changes nothing.
func TestWebhookSignature(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	a.item("ws", 10, 5)
	o := a.reserve("ws", "alice")
	p := a.checkout("alice", o)
	pid := p["id"].(string)
	body := fmt.Sprintf(`{"id":"evt_forged1","object":"event","type":"checkout.session.completed","created":%d,"data":{"object":{"id":%q,"object":"checkout.session","status":"complete","payment_status":"paid","payment_intent":"pi_forged","amount_total":1999,"currency":"usd","metadata":{"order_id":%q}}}}`,
		time.Now().Unix(), pid, o)
	now := time.Now()
	counted := func(result string) float64 {
		return testutil.ToFloat64(metrics.PaymentWebhooks.WithLabelValues(result))
	}
	refused, unknowns := counted(payment.WebhookRefused), counted(payment.WebhookUnknown)
	for _, c := range []struct {
		name, header string
	}{
		{"unsigned", ""},
		{"garbage header", "nonsense"},
		{"forged secret", paysim.Sign([]byte(body), "whsec_not-the-secret-0123456789abcdef", now)},
		{"stale", paysim.Sign([]byte(body), paySecret, now.Add(-301*time.Second))},
		{"future", paysim.Sign([]byte(body), paySecret, now.Add(301*time.Second))},
		{"another body", paysim.Sign([]byte(body+" "), paySecret, now)},
		{"a second t", "t=" + strconv.FormatInt(now.Unix(), 10) + "," + paysim.Sign([]byte(body), paySecret, now.Add(2*time.Hour))},
	} {
		r := a.do("POST", "/api/payments/webhook", "", body, "Stripe-Signature", c.header)
		if r.Status != 400 || r.code() != "invalid_request" {
			t.Errorf("%s: %d %s", c.name, r.Status, r.Raw)
		}
	}
	if a.status("alice", o) != "reserved" {
		t.Fatal("a refused webhook paid the order")
	}
	if got := counted(payment.WebhookRefused) - refused; got < 7 {
		t.Errorf("flashsale_payment_webhooks_total{result=refused} rose by %v, want the 7 refusals", got)
	}
	// Several v1 signatures: any valid one will do. Within the tolerance either way: accepted.
	unknown := strings.ReplaceAll(body, pid, "cs_unknown0000")
	for _, at := range []time.Time{now.Add(-290 * time.Second), now.Add(290 * time.Second)} {
		good := paysim.Sign([]byte(unknown), paySecret, at)
		bad := paysim.Sign([]byte(unknown), "whsec_other-secret-0123456789abcdef01", at)
		_, v1, _ := strings.Cut(bad, ",")
		r := a.do("POST", "/api/payments/webhook", "", unknown, "Stripe-Signature", good+","+v1)
		if r.Status != 200 {
			t.Errorf("unknown payment signed at %s: %d %s", at, r.Status, r.Raw)
		}
	}
	if got := counted(payment.WebhookUnknown) - unknowns; got < 2 {
		t.Errorf("flashsale_payment_webhooks_total{result=unknown} rose by %v, want the 2 unknown payments", got)
	}
	// Metadata alone never finds an order: the payment id is not this order's.
	if a.status("alice", o) != "reserved" {
		t.Fatal("an unknown payment whose metadata names the order paid it")
	}
	// An ignored type, verified: 200.
	other := strings.Replace(body, "checkout.session.completed", "charge.updated", 1)
	if r := a.do("POST", "/api/payments/webhook", "", other, "Stripe-Signature", paysim.Sign([]byte(other), paySecret, now)); r.Status != 200 {
		t.Errorf("ignored type: %d %s", r.Status, r.Raw)
	}
	if a.status("alice", o) != "reserved" {
		t.Fatal("an ignored event changed the order")
	}
}

// TestPaidByProvider: the shopper pays on the simulator; its webhook pays the order once
// (order.paid with the payment id), however often it is delivered; a declined card first
// changes nothing and lets the shopper try again.
func TestPaidByProvider(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 4, ReorderWindow: 50 * time.Millisecond}}, nil)
	a.item("pp", 10, 5)
	o := a.reserve("pp", "alice")
	p := a.checkout("alice", o)
	pid := p["id"].(string)

	if back := a.pay(p["checkout_url"].(string), paysim.CardDeclined); back != "/c/pay/"+pid {
		t.Fatalf("a declined card sent the shopper to %q, not back to the page", back)
	}
	a.delivered()
	if s := a.status("alice", o); s != "reserved" {
		t.Fatalf("after a declined card the order is %s", s)
	}
	r := a.do("GET", "/api/orders/"+o, a.token("alice"), nil)
	if st := r.Body["order"].(map[string]any)["payment_status"]; st != "failed" {
		t.Fatalf("payment_status after a decline: %v", st)
	}
	// A declined card does not end the attempt: checkout answers the same session.
	if again := a.checkout("alice", o); again["id"] != pid {
		t.Fatalf("checkout after a decline made %v, want %s", again["id"], pid)
	}
	if back := a.pay(p["checkout_url"].(string), paysim.CardVisa); !strings.HasPrefix(back, a.url+"/?checkout=success&order="+o) || !strings.Contains(back, pid) {
		t.Fatalf("paying sent the shopper to %q, not back to the shop", back)
	}
	waitFor(t, "the order to be paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
	a.delivered()
	n, pay := a.outboxTypes("pp")
	if n["order.paid"] != 1 || pay[pid] != "order.paid" || n["payment.refunded"] != 0 {
		t.Fatalf("events %v, payments %v", n, pay)
	}
	// A checkout of a paid order is refused.
	if r := a.do("POST", "/api/orders/"+o+"/checkout", a.token("alice"), nil); r.Status != 409 || r.code() != "invalid_state" {
		t.Fatalf("checkout of a paid order: %d %s", r.Status, r.Raw)
	}
}

// TestLatePaymentRefunded: an async payment that succeeds after its reservation expired is
// refunded at the provider once (payment.refunded once), and the order stays expired.
func TestLatePaymentRefunded(t *testing.T) {
	// The payment succeeds 2 s after its confirmation, the reservation lapses 0.5 s after it
	// was made (before the confirmation): the success always arrives after expires_at, and
	// pay.lua decides by Redis TIME, not by whether the expirer got there first.
	a := newPayAPI(t, paysim.Config{AsyncDelay: 2 * time.Second, Chaos: paysim.Chaos{Duplicates: 3}}, func(c *config.Config) {
		c.ReservationTTL = 500 * time.Millisecond
		c.Payment.ProcessingHold = 0 // no hold: the success always comes after the order expired
	})
	a.item("lp", 10, 5)
	o := a.reserve("lp", "alice")
	p := a.checkout("alice", o)
	pid := p["id"].(string)
	a.pay(p["checkout_url"].(string), paysim.CardAsync)
	pi := a.session(pid).PaymentIntent.ID
	// The expiry asks the provider to cancel the payment; it is processing, so it cannot be.
	waitFor(t, "the refund", 30*time.Second, func() bool {
		_, pay := a.outboxTypes("lp")
		return pay[pid] == "payment.refunded"
	})
	a.delivered()
	n, _ := a.outboxTypes("lp")
	if n["payment.refunded"] != 1 || n["order.paid"] != 0 || a.status("alice", o) != "expired" {
		t.Fatalf("events %v, order %s", n, a.status("alice", o))
	}
	refunds := a.stripe.V1Refunds.List(context.Background(), &stripe.RefundListParams{PaymentIntent: stripe.String(pi)})
	count := 0
	for r, err := range refunds.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Amount != 1999 {
			t.Errorf("refund of %d", r.Amount)
		}
		count++
	}
	if count != 1 {
		t.Fatalf("%d refunds at the provider, want 1", count)
	}
}

// TestExpiryCancelsOpenPayment: a reservation that expires, or is cancelled, with its session
// still open has that session expired at the provider.
func TestExpiryCancelsOpenPayment(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, func(c *config.Config) { c.ReservationTTL = 500 * time.Millisecond })
	a.item("ec", 10, 5)
	expiring := a.reserve("ec", "alice")
	pe := a.checkout("alice", expiring)["id"].(string)
	cancelled := a.reserve("ec", "bob")
	pc := a.checkout("bob", cancelled)["id"].(string)
	if r := a.do("POST", "/api/orders/"+cancelled+"/cancel", a.token("bob"), nil); r.Status != 200 {
		t.Fatal(r.Raw)
	}
	for _, pid := range []string{pc, pe} {
		waitFor(t, "session "+pid+" expired at the provider", 20*time.Second, func() bool {
			cs, err := a.stripe.V1CheckoutSessions.Retrieve(context.Background(), pid, nil)
			return err == nil && cs.Status == stripe.CheckoutSessionStatusExpired
		})
	}
	if a.status("alice", expiring) != "expired" {
		t.Fatal("not expired")
	}
}

// TestCheckoutSession: the payment step is a Checkout Session carrying the order's metadata
// (on the session and on its PaymentIntent), card payments only, returning to the shop, alive
// at least Stripe's 30 minutes and past the reservation plus the processing hold; paying it
// pays the order once.
func TestCheckoutSession(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	a.item("cs", 10, 5)
	o := a.reserve("cs", "alice")
	before := time.Now()
	p := a.checkout("alice", o)
	cs := a.session(p["id"].(string))
	att := cs.Metadata["flashsale_attempt"]
	if cs.Metadata["order_id"] != o || cs.Metadata["user_id"] != "alice" || !strings.HasPrefix(att, "fsa_") {
		t.Fatalf("session metadata %v", cs.Metadata)
	}
	if cs.Mode != stripe.CheckoutSessionModePayment || cs.AmountTotal != 1999 || cs.Currency != "usd" ||
		len(cs.PaymentMethodTypes) != 1 || cs.PaymentMethodTypes[0] != "card" {
		t.Fatalf("session %+v", cs)
	}
	if !strings.HasPrefix(cs.SuccessURL, a.url+"/?checkout=success&order="+o) || !strings.HasPrefix(cs.CancelURL, a.url+"/?checkout=cancel&order="+o) {
		t.Fatalf("return URLs %q %q", cs.SuccessURL, cs.CancelURL)
	}
	// Reservation 10 min + hold 30 min: past Stripe's 30-minute minimum.
	if least := before.Add(40 * time.Minute).Unix(); cs.ExpiresAt < least || cs.ExpiresAt > before.Add(24*time.Hour).Unix() {
		t.Fatalf("expires_at %d, want >= %d", cs.ExpiresAt, least)
	}
	a.pay(p["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the order to be paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
	cs = a.session(cs.ID)
	pi, err := a.stripe.V1PaymentIntents.Retrieve(context.Background(), cs.PaymentIntent.ID, nil)
	if err != nil || pi.Metadata["order_id"] != o || pi.Metadata["user_id"] != "alice" || pi.Metadata["flashsale_attempt"] != att {
		t.Fatalf("payment intent %v metadata %v", err, pi.Metadata)
	}
	a.delivered()
	r := a.do("GET", "/api/orders/"+o, a.token("alice"), nil)
	if ro := r.Body["order"].(map[string]any); ro["payment_id"] != cs.ID || ro["payment_status"] != "succeeded" {
		t.Fatalf("paid order %s", r.Raw)
	}
	if n, pay := a.outboxTypes("cs"); n["order.paid"] != 1 || pay[cs.ID] != "order.paid" {
		t.Fatalf("events %v %v", n, pay)
	}
}

// TestCheckoutKeysNeverCollide: payments made under the keys an order id alone would give
// ("checkout-<order id>": another deployment's, or this one's before a restore) are never
// taken for this order's.
func TestCheckoutKeysNeverCollide(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	a.item("collide", 10, 5)
	ctx := context.Background()
	pip := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(1999), Currency: stripe.String("usd")}
	pip.AddMetadata("order_id", "collide.1")
	pip.SetIdempotencyKey("checkout-collide.1")
	foreign, err := a.stripe.V1PaymentIntents.Create(ctx, pip)
	if err != nil {
		t.Fatal(err)
	}
	o := a.reserve("collide", "alice")
	if o != "collide.1" {
		t.Fatalf("order id %s: the test expects collide.1", o)
	}
	p := a.checkout("alice", o)
	if p["id"] == foreign.ID || !strings.HasPrefix(p["id"].(string), "cs_") || p["amount_cents"] != float64(1999) {
		t.Fatalf("checkout answered %v; a payment pre-made under checkout-%s is %s", p, o, foreign.ID)
	}
	// Every attempt's key is its own: a second order (another attempt) gets its own session.
	o2 := a.reserve("collide", "bob")
	if p2 := a.checkout("bob", o2); p2["id"] == p["id"] {
		t.Fatalf("two orders share session %v", p["id"])
	}
	if a.session(p["id"].(string)).Metadata["flashsale_attempt"] == a.session(a.checkout("bob", o2)["id"].(string)).Metadata["flashsale_attempt"] {
		t.Fatal("two attempts share an attempt id")
	}
}

// TestCheckoutAfterProvider500: a provider that answers 500 to a checkout (and keeps that
// answer under the request's key) does not block the order: the next checkout makes a new
// attempt, and the session the 500 made anyway is found by its metadata and expired.
func TestCheckoutAfterProvider500(t *testing.T) {
	var fails atomic.Int32
	fails.Store(1)
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{FailAfterWrite: func(op paysim.Op, _ string) bool {
		return op == paysim.OpSession && fails.Add(-1) >= 0
	}}}, nil)
	a.item("five", 10, 5)
	o := a.reserve("five", "alice")
	r := a.do("POST", "/api/orders/"+o+"/checkout", a.token("alice"), nil)
	if r.Status != 503 || r.code() != "unavailable" {
		t.Fatalf("checkout answered 500 by the provider: %d %s", r.Status, r.Raw)
	}
	p := a.checkout("alice", o)
	if p["status"] != "open" {
		t.Fatalf("checkout after the 500: %v", p)
	}
	var orphan *stripe.CheckoutSession
	waitFor(t, "the orphaned session expired", 20*time.Second, func() bool {
		orphan = nil
		for cs, err := range a.stripe.V1CheckoutSessions.List(context.Background(), &stripe.CheckoutSessionListParams{}).All(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			if cs.ID != p["id"] && cs.Metadata["order_id"] == o {
				orphan = cs
			}
		}
		return orphan != nil && orphan.Status == stripe.CheckoutSessionStatusExpired
	})
	if a.session(p["id"].(string)).Status != stripe.CheckoutSessionStatusOpen {
		t.Fatal("the session in force was expired")
	}
}

// TestCheckoutAfterSessionExpired: once the provider expired the attempt's session, checkout
// opens a new attempt (a new session, a new attempt id); while it is open, the same one.
func TestCheckoutAfterSessionExpired(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	a.item("again", 10, 5)
	o := a.reserve("again", "alice")
	first := a.checkout("alice", o)["id"].(string)
	if again := a.checkout("alice", o)["id"]; again != first {
		t.Fatalf("an open session was replaced: %v, %s", again, first)
	}
	if _, err := a.stripe.V1CheckoutSessions.Expire(context.Background(), first, nil); err != nil {
		t.Fatal(err)
	}
	second := a.checkout("alice", o)["id"].(string)
	if second == first || a.session(second).Metadata["flashsale_attempt"] == a.session(first).Metadata["flashsale_attempt"] {
		t.Fatalf("after the session expired checkout answered %s (first %s)", second, first)
	}
	r := a.do("GET", "/api/orders/"+o, a.token("alice"), nil)
	if ro := r.Body["order"].(map[string]any); ro["payment_id"] != second || ro["payment_status"] != "open" {
		t.Fatalf("order after a new attempt: %s", r.Raw)
	}
}

// TestCheckoutWithStripe: with FLASHSALE_PAYMENT_PROVIDER=stripe the shopper has a page to pay
// on: the Checkout Session's url (here the simulator stands in for Stripe's API).
func TestCheckoutWithStripe(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, func(c *config.Config) {
		c.Payment.Provider = "stripe"
		c.Payment.StripeAPIBase = "http://" + c.Payment.SimAddr
		c.Payment.StripeSecretKey = c.Payment.SimAPIKey
	})
	a.item("st", 10, 5)
	o := a.reserve("st", "alice")
	p := a.checkout("alice", o)
	if p["provider"] != "stripe" || p["checkout_url"] != a.sim.URL()+"/c/pay/"+p["id"].(string) {
		t.Fatalf("payment with stripe: %v", p)
	}
	a.pay(p["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the order to be paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
}

// TestPriceBelowProviderMinimum: with a payment provider, a price under its minimum charge for
// the currency (Stripe's 50 cents in usd) is refused when the item is saved, naming the
// minimum, in a PUT and in an import row, and nothing is saved.
func TestPriceBelowProviderMinimum(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	body := map[string]any{"name": "Pin", "category": "c", "price_cents": 49, "stock": 5, "per_user_limit": 1}
	r := a.do("PUT", "/api/admin/items/pin", testAdminToken, body)
	if r.Status != 400 || r.code() != "invalid_request" || !strings.Contains(r.Raw, "minimum charge of 50 (usd)") {
		t.Fatalf("price 49: %d %s", r.Status, r.Raw)
	}
	if g := a.do("GET", "/api/items/pin", "", nil); g.Status != 404 {
		t.Fatalf("a refused item was saved: %d %s", g.Status, g.Raw)
	}
	body["price_cents"] = 50
	if r := a.do("PUT", "/api/admin/items/pin", testAdminToken, body); r.Status != 201 {
		t.Fatalf("price 50: %d %s", r.Status, r.Raw)
	}
	csv := "id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at\ncheap,Cheap,c,30,1,1,,\nfine,Fine,c,500,1,1,,\n"
	r = a.do("POST", "/api/admin/items/import", testAdminToken, csv, "Content-Type", "text/csv")
	if r.Status != 200 || r.Body["created"] != 1.0 || !strings.Contains(r.Raw, `"line":2`) || !strings.Contains(r.Raw, "minimum charge") {
		t.Fatalf("import: %d %s", r.Status, r.Raw)
	}
}

// TestCheckoutRefused: a provider's permanent refusal (a 4xx) is 502 payment_refused with its
// reason, not "cannot be reached, try again"; the order stays reserved without a payment.
func TestCheckoutRefused(t *testing.T) {
	a := newPayAPI(t, paysim.Config{}, nil)
	// 2 × 60,000,000 cents is over the most Stripe (and the simulator) takes in one payment.
	r := a.do("PUT", "/api/admin/items/yacht", testAdminToken, map[string]any{
		"name": "Yacht", "category": "boats", "price_cents": 60_000_000, "stock": 5, "per_user_limit": 2})
	if r.Status != 201 {
		t.Fatal(r.Raw)
	}
	r = a.do("POST", "/api/items/yacht/purchase", a.token("alice"), map[string]any{"quantity": 2})
	if r.Status != 201 {
		t.Fatal(r.Raw)
	}
	o := r.Body["order"].(map[string]any)["id"].(string)
	for range 2 { // a second try makes a new attempt and is refused the same way
		r = a.do("POST", "/api/orders/"+o+"/checkout", a.token("alice"), nil)
		msg, _ := r.Body["error"].(map[string]any)["message"].(string)
		if r.Status != 502 || r.code() != "payment_refused" || !strings.Contains(msg, "99999999") {
			t.Fatalf("refused checkout: %d %s", r.Status, r.Raw)
		}
	}
	g := a.do("GET", "/api/orders/"+o, a.token("alice"), nil)
	if !strings.Contains(g.Raw, `"payment_id":null`) || a.status("alice", o) != "reserved" {
		t.Fatalf("after a refusal: %s", g.Raw)
	}
}

// TestProcessingHoldsReservation: a slow payment submitted shortly before the reservation ends
// holds it past expires_at (payment_status processing) until the provider decides: then the
// order is paid, not expired and refunded. A cancel meanwhile answers 409 payment_processing
// and changes nothing.
func TestProcessingHoldsReservation(t *testing.T) {
	a := newPayAPI(t, paysim.Config{AsyncDelay: 6 * time.Second}, func(c *config.Config) {
		c.ReservationTTL = 3 * time.Second
		c.Payment.ProcessingHold = time.Minute
	})
	a.item("hold", 10, 5)
	o := a.reserve("hold", "alice")
	p := a.checkout("alice", o)
	a.pay(p["checkout_url"].(string), paysim.CardAsync)
	waitFor(t, "payment_status processing", 10*time.Second, func() bool {
		r := a.do("GET", "/api/orders/"+o, a.token("alice"), nil)
		return r.Body["order"].(map[string]any)["payment_status"] == "processing"
	})
	r := a.do("POST", "/api/orders/"+o+"/cancel", a.token("alice"), nil)
	if r.Status != 409 || r.code() != "payment_processing" {
		t.Fatalf("cancel while processing: %d %s", r.Status, r.Raw)
	}
	if s := a.status("alice", o); s != "reserved" {
		t.Fatalf("after a refused cancel the order is %s", s)
	}
	waitFor(t, "the order to be paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
	a.delivered()
	n, _ := a.outboxTypes("hold")
	if n["order.paid"] != 1 || n["order.expired"] != 0 || n["payment.refunded"] != 0 || n["order.cancelled"] != 0 {
		t.Fatalf("events %v", n)
	}
}

// TestProcessingHoldIsBounded: a payment still processing when expires_at + the hold passes
// lets the order expire (its stock returns); its later success is refunded.
func TestProcessingHoldIsBounded(t *testing.T) {
	a := newPayAPI(t, paysim.Config{AsyncDelay: 4 * time.Second}, func(c *config.Config) {
		c.ReservationTTL = 500 * time.Millisecond
		c.Payment.ProcessingHold = 1500 * time.Millisecond
	})
	a.item("bound", 10, 5)
	o := a.reserve("bound", "alice")
	p := a.checkout("alice", o)
	a.pay(p["checkout_url"].(string), paysim.CardAsync)
	waitFor(t, "the order to expire", 20*time.Second, func() bool { return a.status("alice", o) == "expired" })
	waitFor(t, "the refund", 30*time.Second, func() bool {
		n, _ := a.outboxTypes("bound")
		return n["payment.refunded"] == 1
	})
	if n, _ := a.outboxTypes("bound"); n["order.paid"] != 0 {
		t.Fatalf("events %v", n)
	}
}

// hookGate stands between the simulator and the api's webhook: it forwards every delivery,
// except those of the event types it holds, which it answers 503 (the simulator delivers them
// again with backoff) until they are let through. Tests use it to order deliveries.
type hookGate struct {
	srv    *httptest.Server
	mu     sync.Mutex
	target string          // the api's webhook URL
	held   map[string]bool // event type -> answered 503
	passed map[string]int  // event type -> deliveries the api answered 2xx
}

func newHookGate(t *testing.T, held ...string) *hookGate {
	g := &hookGate{held: map[string]bool{}, passed: map[string]int{}}
	for _, typ := range held {
		g.held[typ] = true
	}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *hookGate) url() string { return g.srv.URL + "/hook" }

func (g *hookGate) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var ev struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &ev)
	g.mu.Lock()
	target, held := g.target, g.held[ev.Type]
	g.mu.Unlock()
	if held || target == "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, target, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", r.Header.Get("Stripe-Signature"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	res.Body.Close()
	if res.StatusCode/100 == 2 {
		g.mu.Lock()
		g.passed[ev.Type]++
		g.mu.Unlock()
	}
	w.WriteHeader(res.StatusCode)
}

// release lets the deliveries of typ through from now on.
func (g *hookGate) release(typ string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.held, typ)
}

// applied is how many deliveries of typ the api answered 2xx.
func (g *hookGate) applied(typ string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.passed[typ]
}

// newGatedPayAPI is newPayAPI with the simulator's webhooks going through g.
func newGatedPayAPI(t *testing.T, g *hookGate, simCfg paysim.Config, tweak func(*config.Config)) *payAPI {
	simCfg.WebhookURL = g.url()
	a := newPayAPI(t, simCfg, pollable(tweak))
	g.mu.Lock()
	g.target = a.url + "/api/payments/webhook"
	g.mu.Unlock()
	return a
}

// pollable lifts the per-user read limit, which the tests' polling of an order would hit.
func pollable(tweak func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		c.LimitReads = config.Limit{}
		if tweak != nil {
			tweak(c)
		}
	}
}

// TestAsyncPaymentFailure: a debit failing after processing leaves the order reserved with
// payment_status failed, and the next checkout opens a new session the shopper pays. A late
// payment_intent.processing does not bring processing back: the order is not held, and cancel
// is not refused.
func TestAsyncPaymentFailure(t *testing.T) {
	g := newHookGate(t, "payment_intent.processing")
	a := newGatedPayAPI(t, g, paysim.Config{AsyncDelay: 300 * time.Millisecond, Chaos: paysim.Chaos{Duplicates: 2}}, nil)
	a.item("af", 10, 5)
	o := a.reserve("af", "alice")
	p := a.checkout("alice", o)
	first := p["id"].(string)
	a.pay(p["checkout_url"].(string), paysim.CardAsyncFail)
	waitFor(t, "the failed debit", 30*time.Second, func() bool {
		return g.applied("checkout.session.async_payment_failed") > 0 && g.applied("payment_intent.payment_failed") > 0
	})
	g.release("payment_intent.processing")
	waitFor(t, "the late processing event", 30*time.Second, func() bool { return g.applied("payment_intent.processing") > 0 })
	a.delivered()
	if st, s := a.paymentStatus("alice", o), a.status("alice", o); st != "failed" || s != "reserved" {
		t.Fatalf("after a failed debit and a late processing event: payment_status %s, status %s", st, s)
	}
	again := a.checkout("alice", o)
	if again["id"] == first || again["status"] != "open" {
		t.Fatalf("checkout after a failed debit answered %v (the failed session was %s)", again, first)
	}
	a.pay(again["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the order to be paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
	a.delivered()
	n, pay := a.outboxTypes("af")
	if n["order.paid"] != 1 || pay[again["id"].(string)] != "order.paid" || n["payment.refunded"] != 0 {
		t.Fatalf("events %v, payments %v", n, pay)
	}

	// A second order: the same failure, then the shopper cancels instead (no hold is left).
	o2 := a.reserve("af", "bob")
	p2 := a.checkout("bob", o2)
	a.pay(p2["checkout_url"].(string), paysim.CardAsyncFail)
	waitFor(t, "payment_status failed", 30*time.Second, func() bool { return a.paymentStatus("bob", o2) == "failed" })
	a.delivered()
	if r := a.do("POST", "/api/orders/"+o2+"/cancel", a.token("bob"), nil); r.Status != 200 {
		t.Fatalf("cancel after a failed debit: %d %s", r.Status, r.Raw)
	}
}

// TestProcessingHoldStartsAtEitherEvent: the hold on a reservation starts at whichever of
// checkout.session.completed (payment_status unpaid) and payment_intent.processing the api
// gets first, the other one (and duplicates) changing nothing: while the debit is on its way
// the order stays reserved past expires_at and cancel answers 409 payment_processing.
func TestProcessingHoldStartsAtEitherEvent(t *testing.T) {
	for _, first := range []string{"checkout.session.completed", "payment_intent.processing"} {
		t.Run(first, func(t *testing.T) {
			other := "payment_intent.processing"
			if first == other {
				other = "checkout.session.completed"
			}
			g := newHookGate(t, other, "payment_intent.succeeded", "checkout.session.async_payment_succeeded")
			a := newGatedPayAPI(t, g, paysim.Config{AsyncDelay: 2 * time.Second, Chaos: paysim.Chaos{Duplicates: 3}}, func(c *config.Config) {
				c.ReservationTTL = 3 * time.Second
				c.Payment.ProcessingHold = time.Minute
			})
			a.item("he", 10, 5)
			o := a.reserve("he", "alice")
			r := a.do("GET", "/api/orders/"+o, a.token("alice"), nil)
			expires, err := time.Parse(time.RFC3339Nano, r.Body["order"].(map[string]any)["expires_at"].(string))
			if err != nil {
				t.Fatal(err)
			}
			p := a.checkout("alice", o)
			a.pay(p["checkout_url"].(string), paysim.CardAsync)
			waitFor(t, "payment_status processing", 10*time.Second, func() bool { return a.paymentStatus("alice", o) == "processing" })
			if g.applied(other) != 0 {
				t.Fatalf("%s was applied though held", other)
			}
			// Past expires_at, with the provider's decision held back: still reserved.
			waitFor(t, "expires_at to pass", 10*time.Second, func() bool { return time.Now().After(expires.Add(500 * time.Millisecond)) })
			g.release(other)
			waitFor(t, "the other event", 30*time.Second, func() bool { return g.applied(other) > 0 })
			if s, st := a.status("alice", o), a.paymentStatus("alice", o); s != "reserved" || st != "processing" {
				t.Fatalf("past expires_at while processing: %s, payment_status %s", s, st)
			}
			if r := a.do("POST", "/api/orders/"+o+"/cancel", a.token("alice"), nil); r.Status != 409 || r.code() != "payment_processing" {
				t.Fatalf("cancel while processing: %d %s", r.Status, r.Raw)
			}
			g.release("payment_intent.succeeded")
			g.release("checkout.session.async_payment_succeeded")
			waitFor(t, "the order to be paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
			a.delivered()
			n, _ := a.outboxTypes("he")
			if n["order.paid"] != 1 || n["order.expired"] != 0 || n["payment.refunded"] != 0 {
				t.Fatalf("events %v", n)
			}
		})
	}
}

// TestProcessingFailsPastExpiry: a debit submitted shortly before the reservation ends holds
// it past expires_at; when the debit then fails, the hold ends and the order expires at once
// (its stock returns), not at the end of the hold; the shopper cannot start a new attempt.
func TestProcessingFailsPastExpiry(t *testing.T) {
	// The debit fails 6 s after it is submitted, 3 s after the reservation's end at the earliest.
	a := newPayAPI(t, paysim.Config{AsyncDelay: 6 * time.Second}, pollable(func(c *config.Config) {
		c.ReservationTTL = 3 * time.Second
		c.Payment.ProcessingHold = 10 * time.Minute
	}))
	a.item("fe", 10, 5)
	o := a.reserve("fe", "alice")
	p := a.checkout("alice", o)
	a.pay(p["checkout_url"].(string), paysim.CardAsyncFail)
	waitFor(t, "payment_status processing", 10*time.Second, func() bool { return a.paymentStatus("alice", o) == "processing" })
	r := a.do("GET", "/api/orders/"+o, a.token("alice"), nil)
	expires, err := time.Parse(time.RFC3339Nano, r.Body["order"].(map[string]any)["expires_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "expires_at to pass", 10*time.Second, func() bool { return time.Now().After(expires.Add(300 * time.Millisecond)) })
	if s, st := a.status("alice", o), a.paymentStatus("alice", o); s != "reserved" || st != "processing" {
		t.Fatalf("past expires_at while processing: %s, payment_status %s", s, st)
	}
	if r := a.do("POST", "/api/orders/"+o+"/cancel", a.token("alice"), nil); r.Status != 409 || r.code() != "payment_processing" {
		t.Fatalf("cancel while processing: %d %s", r.Status, r.Raw)
	}
	// The hold is ten minutes: the order expires within seconds of the failure, or not at all here.
	waitFor(t, "the order to expire after the failed debit", 20*time.Second, func() bool { return a.status("alice", o) == "expired" })
	if st := a.paymentStatus("alice", o); st != "failed" {
		t.Fatalf("payment_status %s after the failed debit", st)
	}
	if left := a.stockLeft("fe"); left != 10 {
		t.Fatalf("stock_left %d after the expiry, want 10", left)
	}
	if r := a.do("POST", "/api/orders/"+o+"/checkout", a.token("alice"), nil); r.Status != 409 {
		t.Fatalf("checkout of the expired order: %d %s", r.Status, r.Raw)
	}
	a.delivered()
	if n, _ := a.outboxTypes("fe"); n["order.expired"] != 1 || n["order.paid"] != 0 || n["payment.refunded"] != 0 {
		t.Fatalf("events %v", n)
	}
}

package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v85"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/paysim"
	"github.com/flashsale/flashsale/internal/testenv"
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
	simCfg.WebhookURL = base + "/api/payments/webhook"
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
	cfg.LimitPurchase, cfg.LimitPay, cfg.LimitCancel = limits.Policy{}, limits.Policy{}, limits.Policy{}
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.ExpiryInterval = 20 * time.Millisecond
	cfg.Payment.Provider = "sim"
	cfg.Payment.SimAddr = sim.Addr()
	cfg.Payment.WebhookSecrets, cfg.Payment.SecretGenerated = []string{paySecret}, false
	cfg.Payment.SimAPIKey, cfg.Payment.SimKeyGenerated = sim.APIKey(), false
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

// confirm pays on the simulator as the shopper's page would, with one of its test cards.
func (a *payAPI) confirm(pid, card string) (*stripe.PaymentIntent, error) {
	return a.stripe.V1PaymentIntents.Confirm(context.Background(), pid, &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String(card)})
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
	for _, f := range []string{"id", "provider", "status", "amount_cents", "currency", "client_secret", "checkout_url"} {
		if _, ok := p[f]; !ok {
			t.Errorf("payment lacks %s: %v", f, p)
		}
	}
	if p["provider"] != "sim" || p["status"] != "requires_payment_method" || p["amount_cents"] != float64(1999) ||
		p["currency"] != "usd" || p["client_secret"] == "" || p["checkout_url"] != a.sim.URL()+"/checkout/"+p["id"].(string) {
		t.Fatalf("payment %v", p)
	}
	// Once per order: asking again answers the same payment.
	if again := a.checkout("alice", o1); again["id"] != p["id"] {
		t.Fatalf("second checkout made %v, first %v", again["id"], p["id"])
	}
	r := a.do("GET", "/api/orders/"+o1, a.token("alice"), nil)
	if r.Body["order"].(map[string]any)["payment_id"] != p["id"] {
		t.Fatalf("order after checkout: %s", r.Raw)
	}
	fresh := a.reserve("co", "alice")
	if r := a.do("GET", "/api/orders/"+fresh, a.token("alice"), nil); !strings.Contains(r.Raw, `"payment_id":null`) {
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
	if p := a.checkout("alice", o); p["id"] == "" || p["status"] != "requires_payment_method" {
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
	body := fmt.Sprintf(`{"id":"evt_forged1","object":"event","type":"payment_intent.succeeded","created":%d,"data":{"object":{"id":%q,"object":"payment_intent","status":"succeeded","amount":1999,"currency":"usd","metadata":{"order_id":%q}}}}`,
		time.Now().Unix(), pid, o)
	now := time.Now()
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
	// Several v1 signatures: any valid one will do. Within the tolerance either way: accepted.
	unknown := strings.ReplaceAll(body, pid, "pi_unknown0000")
	for _, at := range []time.Time{now.Add(-290 * time.Second), now.Add(290 * time.Second)} {
		good := paysim.Sign([]byte(unknown), paySecret, at)
		bad := paysim.Sign([]byte(unknown), "whsec_other-secret-0123456789abcdef01", at)
		_, v1, _ := strings.Cut(bad, ",")
		r := a.do("POST", "/api/payments/webhook", "", unknown, "Stripe-Signature", good+","+v1)
		if r.Status != 200 {
			t.Errorf("unknown payment signed at %s: %d %s", at, r.Status, r.Raw)
		}
	}
	// Metadata alone never finds an order: the payment id is not this order's.
	if a.status("alice", o) != "reserved" {
		t.Fatal("an unknown payment whose metadata names the order paid it")
	}
	// An ignored type, verified: 200.
	other := strings.Replace(body, "payment_intent.succeeded", "charge.updated", 1)
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
	pid := a.checkout("alice", o)["id"].(string)

	_, err := a.confirm(pid, paysim.CardDeclined)
	var se *stripe.Error
	if !errors.As(err, &se) || se.Code != stripe.ErrorCodeCardDeclined {
		t.Fatalf("declined card: %v", err)
	}
	a.delivered()
	if s := a.status("alice", o); s != "reserved" {
		t.Fatalf("after a declined card the order is %s", s)
	}
	if _, err := a.confirm(pid, paysim.CardVisa); err != nil {
		t.Fatal(err)
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
	})
	a.item("lp", 10, 5)
	o := a.reserve("lp", "alice")
	pid := a.checkout("alice", o)["id"].(string)
	pi, err := a.confirm(pid, paysim.CardAsync)
	if err != nil || pi.Status != stripe.PaymentIntentStatusProcessing {
		t.Fatalf("async confirm: %v %v", pi, err)
	}
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
	refunds := a.stripe.V1Refunds.List(context.Background(), &stripe.RefundListParams{PaymentIntent: stripe.String(pid)})
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

// TestExpiryCancelsOpenPayment: a reservation that expires, or is cancelled, with its payment
// still open has that payment cancelled at the provider.
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
		waitFor(t, "payment "+pid+" cancelled at the provider", 20*time.Second, func() bool {
			pi, err := a.stripe.V1PaymentIntents.Retrieve(context.Background(), pid, nil)
			return err == nil && pi.Status == stripe.PaymentIntentStatusCanceled
		})
	}
	if a.status("alice", expiring) != "expired" {
		t.Fatal("not expired")
	}
}

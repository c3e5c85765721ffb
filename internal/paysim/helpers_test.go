package paysim_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/flashsale/flashsale/internal/paysim"
)

const testKey = "sk_test_paysim"

// start runs a simulator on a free loopback port for the test.
func start(t *testing.T, cfg paysim.Config) *paysim.Server {
	t.Helper()
	if cfg.RetryMin == 0 {
		cfg.RetryMin, cfg.RetryMax = 10*time.Millisecond, 200*time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	sim := paysim.New(cfg)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	return sim
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("reply %d is not JSON: %v: %s", r.status, err, r.body)
	}
	return m
}

// errCode is error.code of an error reply (and checks the error's shape).
func (r reply) errCode(t *testing.T) string {
	t.Helper()
	e, ok := r.json(t)["error"].(map[string]any)
	if !ok {
		t.Fatalf("reply %d has no error object: %s", r.status, r.body)
	}
	for _, f := range []string{"type", "code", "message"} {
		if s, _ := e[f].(string); s == "" {
			t.Fatalf("error without %s: %s", f, r.body)
		}
	}
	return e["code"].(string)
}

// call sends a Stripe-style request: form-encoded, bearer key, optional Idempotency-Key.
func call(t *testing.T, method, u, key, idemKey string, form url.Values) reply {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(form.Encode())
	} else if len(form) > 0 {
		u += "?" + form.Encode()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: res.StatusCode, header: res.Header, body: raw}
}

// createIntent makes a payment intent through the API and returns its JSON.
func createIntent(t *testing.T, sim *paysim.Server, amount, orderID string) map[string]any {
	t.Helper()
	r := call(t, "POST", sim.URL()+"/v1/payment_intents", testKey, "", url.Values{
		"amount": {amount}, "currency": {"usd"}, "metadata[order_id]": {orderID}})
	if r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	return r.json(t)
}

func confirm(t *testing.T, sim *paysim.Server, pi map[string]any, pm string) reply {
	t.Helper()
	return call(t, "POST", sim.URL()+"/v1/payment_intents/"+pi["id"].(string)+"/confirm", "", "", url.Values{
		"client_secret": {pi["client_secret"].(string)}, "payment_method": {pm}})
}

// received is one delivery that the receiver accepted.
type received struct {
	id, typ string
	object  map[string]any
	t       int64 // the signature's timestamp
}

// receiver is a webhook endpoint that verifies every delivery with stripe-go's
// webhook.ConstructEvent (default 300 s tolerance, API version checked) and refuses the first
// failFirst attempts of every event id with a 500.
type receiver struct {
	srv       *httptest.Server
	secret    string
	failFirst int

	mu       sync.Mutex
	attempts map[string]int // per event id, every attempt
	got      []received     // accepted deliveries, in arrival order
	bad      []string       // deliveries that did not verify
	refuse   bool           // while set, every attempt is answered 503
	changed  chan struct{}
}

func newReceiver(t testing.TB, secret string, failFirst int) *receiver {
	rc := &receiver{secret: secret, failFirst: failFirst, attempts: map[string]int{}, changed: make(chan struct{}, 1)}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) url() string { return rc.srv.URL + "/hook" }

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	defer func() {
		select {
		case rc.changed <- struct{}{}:
		default:
		}
	}()
	body, _ := io.ReadAll(r.Body)
	sig := r.Header.Get("Stripe-Signature")
	ev, err := webhook.ConstructEvent(body, sig, rc.secret)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err != nil {
		rc.bad = append(rc.bad, err.Error())
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.attempts[ev.ID]++
	if rc.refuse || rc.attempts[ev.ID] <= rc.failFirst {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	var obj map[string]any
	var sec int64
	if json.Unmarshal(ev.Data.Raw, &obj) != nil || json.Unmarshal([]byte(strings.TrimPrefix(strings.Split(sig, ",")[0], "t=")), &sec) != nil {
		rc.bad = append(rc.bad, "data.object or t= does not parse")
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.got = append(rc.got, received{id: ev.ID, typ: string(ev.Type), object: obj, t: sec})
	w.WriteHeader(http.StatusOK)
}

// waitFor polls cond until it holds, failing the test after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// accepted returns the accepted deliveries of the given type.
func (rc *receiver) accepted(typ string) []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []received
	for _, g := range rc.got {
		if typ == "" || g.typ == typ {
			out = append(out, g)
		}
	}
	return out
}

func (rc *receiver) badSignatures() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.bad...)
}

// drained: every delivery the simulator made was answered 2xx.
func drained(sim *paysim.Server) func() bool {
	return sim.Idle
}

// httptestServer serves h on loopback for the test and returns its URL.
func httptestServer(t testing.TB, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/hook"
}

func readAll(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	return b
}

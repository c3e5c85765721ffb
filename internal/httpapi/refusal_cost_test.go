package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// Refusals and replays cost Redis (a 429 on cancel ~6 commands, a purchase
// replay ~11). Counted on a private server (INFO commandstats, a script call counting with the
// commands it runs): once a shopper is over a limit, her refused requests cost no command
// (cancel, and a purchase without an Idempotency-Key) or one (a purchase with a new key: the
// replay look-up), and a replay of a settled key costs one. The answers and their headers are
// those Redis's own refusal and replay gave.
func TestRefusalsAndReplaysCostNoRedis(t *testing.T) {
	priv, keys, addr := testenv.PrivateRedis(t)
	a := newRankedAPI(t, func(c *config.Config) {
		c.RedisAddrs = []string{addr}
		c.RedisPrefix = keys.Prefix
		c.LimitPurchase = config.Limit{Rate: 1, Period: time.Minute, Burst: 1}
		c.LimitCancel = config.Limit{Rate: 1, Period: time.Minute, Burst: 1}
	})
	a.item("phone", 100, 5)
	tok := a.token("mallory")
	bought := a.do("POST", "/api/items/phone/purchase", tok, nil, "Idempotency-Key", "k1")
	if bought.Status != http.StatusCreated {
		t.Fatalf("purchase: %d %s", bought.Status, bought.Raw)
	}
	order, _ := bought.Body["order"].(map[string]any)
	oid, _ := order["id"].(string)

	// Replays of the settled key: 200 with the order, no RateLimit headers, one command each.
	before := testenv.Commands(t, priv)
	for i := range 50 {
		r := a.do("POST", "/api/items/phone/purchase", tok, nil, "Idempotency-Key", "k1")
		if o, _ := r.Body["order"].(map[string]any); r.Status != http.StatusOK || o["id"] != oid || r.Header.Get("RateLimit-Limit") != "" {
			t.Fatalf("replay %d: %d %v %s", i, r.Status, r.Header, r.Raw)
		}
	}
	if used := testenv.Commands(t, priv) - before - 1; used > 50 {
		t.Fatalf("50 replays of a settled key cost %d commands, want at most 50", used)
	}

	// Over the purchase limit: the first refusal is Redis's; the rest come from memory.
	first := a.do("POST", "/api/items/phone/purchase", tok, nil)
	if first.Status != http.StatusTooManyRequests || first.Header.Get("Retry-After") == "" {
		t.Fatalf("over the purchase limit: %d %v", first.Status, first.Header)
	}
	before = testenv.Commands(t, priv)
	for i := range 100 {
		r := a.do("POST", "/api/items/phone/purchase", tok, nil)
		sameRefusal(t, "purchase "+strconv.Itoa(i), first, r)
	}
	if used := testenv.Commands(t, priv) - before - 1; used != 0 {
		t.Fatalf("100 refused purchases cost %d commands, want 0", used)
	}
	before = testenv.Commands(t, priv)
	for i := range 50 {
		r := a.do("POST", "/api/items/phone/purchase", tok, nil, "Idempotency-Key", "new-"+strconv.Itoa(i))
		sameRefusal(t, "keyed purchase "+strconv.Itoa(i), first, r)
	}
	if used := testenv.Commands(t, priv) - before - 1; used > 50 {
		t.Fatalf("50 refused purchases with new keys cost %d commands, want at most 50", used)
	}

	// Cancel: allowed once (the order is cancelled), then refused; the refusals from memory.
	if r := a.do("POST", "/api/orders/"+oid+"/cancel", tok, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	first = a.do("POST", "/api/orders/"+oid+"/cancel", tok, nil)
	if first.Status != http.StatusTooManyRequests {
		t.Fatalf("cancel over its limit: %d %s", first.Status, first.Raw)
	}
	before = testenv.Commands(t, priv)
	for i := range 100 {
		r := a.do("POST", "/api/orders/"+oid+"/cancel", tok, nil)
		sameRefusal(t, "cancel "+strconv.Itoa(i), first, r)
	}
	if used := testenv.Commands(t, priv) - before - 1; used != 0 {
		t.Fatalf("100 refused cancels cost %d commands, want 0", used)
	}
}

// sameRefusal: r is a 429 rate_limited with the headers of first (Retry-After and Reset may
// only have counted down).
func sameRefusal(t *testing.T, what string, first, r reply) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || r.code() != "rate_limited" {
		t.Fatalf("%s: %d %s, want 429 rate_limited", what, r.Status, r.Raw)
	}
	for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Policy"} {
		if r.Header.Get(h) != first.Header.Get(h) {
			t.Fatalf("%s: %s %q, Redis's refusal said %q", what, h, r.Header.Get(h), first.Header.Get(h))
		}
	}
	ra, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	fa, _ := strconv.Atoi(first.Header.Get("Retry-After"))
	if ra < 1 || ra > fa || r.Header.Get("RateLimit") == "" || r.Header.Get("RateLimit-Reset") == "" {
		t.Fatalf("%s: headers %v, first refusal's %v", what, r.Header, first.Header)
	}
}

package httpapi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// A request whose access line is off (a fast 2xx at info) costs no allocation: the level is
// decided first and no attribute is built. This is what every request of a sale pays.
func TestAccessLogOffAllocatesNothing(t *testing.T) {
	l := &accessLog{AccessLog: AccessLog{Slow: time.Second, Sample: 1000,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))}}
	ctx := context.Background()
	// Sample 1000 with 100 runs (plus the warm-up run) never reaches the sampled request.
	if n := testing.AllocsPerRun(100, func() {
		l.record(ctx, "abc-1", "POST", purchaseRoute, 409, 3*time.Millisecond)
	}); n != 0 {
		t.Fatalf("%v allocations per request with the line off, want 0", n)
	}
}

func ceilMS(s string) int {
	f, _ := strconv.ParseFloat(s, 64)
	return int(math.Ceil(f / 1000))
}

// TestLimitHeadersAgreeWithScript: every limited answer carries the headers, with the figures
// of the script's reply for that request; the refusal is 429 rate_limited with Retry-After.
func TestLimitHeadersAgreeWithScript(t *testing.T) {
	a := newLimitedAPI(t, map[string]string{"FLASHSALE_LIMIT_PAY": "1/2s:3"})
	tok := a.token("alice")
	for i := 0; i < 4; i++ {
		r := a.send("POST", "/api/orders/nothing.1/pay", tok, "", "")
		script := a.rec.reply()
		if len(script) != 4 {
			t.Fatalf("request %d: no limiter reply recorded", i)
		}
		allowed := script[0] == "1"
		want := map[string]string{
			"RateLimit-Limit":     "3",
			"RateLimit-Remaining": script[1],
			"RateLimit-Reset":     strconv.Itoa(ceilMS(script[3])),
			"RateLimit-Policy":    `"pay";q=3;w=6`,
			"RateLimit":           fmt.Sprintf(`"pay";r=%s;t=%d`, script[1], ceilMS(script[3])),
			"Retry-After":         "",
		}
		if !allowed {
			want["Retry-After"] = strconv.Itoa(max(1, ceilMS(script[2])))
		}
		for h, v := range want {
			if got := r.header.Get(h); got != v {
				t.Errorf("request %d: %s = %q, script says %q (reply %q)", i, h, got, v, script)
			}
		}
		switch {
		case i < 3 && (!allowed || r.status != http.StatusNotFound):
			t.Fatalf("request %d within the burst: %d %s, script %q", i, r.status, r.code, script)
		case i == 3 && (allowed || r.status != http.StatusTooManyRequests || r.code != "rate_limited"):
			t.Fatalf("request over the burst: %d %s, script %q", r.status, r.code, script)
		}
	}
	// Another user has a budget of their own.
	if r := a.send("POST", "/api/orders/nothing.1/pay", a.token("bob"), "", ""); r.status != http.StatusNotFound || r.header.Get("RateLimit-Remaining") != "2" {
		t.Fatalf("bob: %d %v", r.status, r.header)
	}
}

// TestLimitRetryAfterHonoured: a client that waits Retry-After seconds gets through.
func TestLimitRetryAfterHonoured(t *testing.T) {
	a := newLimitedAPI(t, map[string]string{"FLASHSALE_LIMIT_CANCEL": "1/1s:1"})
	tok := a.token("carol")
	if r := a.send("POST", "/api/orders/x.1/cancel", tok, "", ""); r.status != http.StatusNotFound {
		t.Fatalf("first cancel: %d %s", r.status, r.code)
	}
	r := a.send("POST", "/api/orders/x.1/cancel", tok, "", "")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("second cancel: %d %s", r.status, r.code)
	}
	wait, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || wait < 1 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	time.Sleep(time.Duration(wait) * time.Second)
	if r := a.send("POST", "/api/orders/x.1/cancel", tok, "", ""); r.status != http.StatusNotFound {
		t.Fatalf("after Retry-After: %d %s", r.status, r.code)
	}
}

// TestLimitLogin: login is limited per client IP and per requested user; the handler still
// reads the whole body; X-Forwarded-For counts only from a configured proxy.
func TestLimitLogin(t *testing.T) {
	env := map[string]string{"FLASHSALE_LIMIT_LOGIN_IP": "3/1m:3", "FLASHSALE_LIMIT_LOGIN_USER": "2/1m:2"}
	a := newLimitedAPI(t, env)
	login := func(user, remote string, headers ...string) limitReply {
		return a.send("POST", "/api/login", "", `{"user":"`+user+`"}`, remote, headers...)
	}

	// One IP, three names, then refused by the IP policy.
	for _, u := range []string{"u1", "u2", "u3"} {
		r := login(u, "10.0.0.1:5000")
		if r.status != http.StatusOK || r.body["user"] != u {
			t.Fatalf("login %s: %d %v (the handler must see the body)", u, r.status, r.body)
		}
	}
	r := login("u4", "10.0.0.1:5001")
	if r.status != http.StatusTooManyRequests || !strings.HasPrefix(r.header.Get("RateLimit-Policy"), `"login_ip"`) {
		t.Fatalf("fourth login from one IP: %d %v", r.status, r.header)
	}
	// A refused IP costs no body read.
	body := &watchedBody{r: strings.NewReader(`{"user":"u5"}`)}
	req := httptest.NewRequest("POST", "/api/login", body)
	req.RemoteAddr = "10.0.0.1:5002"
	w := httptest.NewRecorder()
	a.srv.ServeHTTP(w, req)
	if w.Code != http.StatusTooManyRequests || body.read {
		t.Fatalf("login from a refused IP: %d, body read: %v", w.Code, body.read)
	}

	// Many IPs, one name: refused by the user policy.
	for i := 0; i < 2; i++ {
		if r := login("zed", fmt.Sprintf("10.0.1.%d:5000", i)); r.status != http.StatusOK {
			t.Fatalf("zed from IP %d: %d", i, r.status)
		}
	}
	r = login("zed", "10.0.1.9:5000")
	if r.status != http.StatusTooManyRequests || !strings.HasPrefix(r.header.Get("RateLimit-Policy"), `"login_user"`) {
		t.Fatalf("third zed: %d %v", r.status, r.header)
	}

	// X-Forwarded-For from an untrusted peer is ignored: one IP however the header varies.
	for i := 0; i < 4; i++ {
		r := login(fmt.Sprintf("x%d", i), "10.0.2.1:5000", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
		if want := map[bool]int{true: 429, false: 200}[i == 3]; r.status != want {
			t.Fatalf("spoofed XFF %d: %d, want %d", i, r.status, want)
		}
	}

	// IPv6 clients count per /64 (one host or subscriber gets a whole /64): three addresses of
	// one /64 share a budget, another /64 has its own; a mapped IPv4 address is that address.
	for i, remote := range []string{"[2001:db8:1:2::1]:5000", "[2001:db8:1:2::2]:5000", "[2001:db8:1:2:ffff::9]:5000"} {
		if r := login(fmt.Sprintf("v%d", i), remote); r.status != http.StatusOK {
			t.Fatalf("IPv6 login %d: %d", i, r.status)
		}
	}
	if r := login("v3", "[2001:db8:1:2:abcd::1]:5000"); r.status != http.StatusTooManyRequests {
		t.Fatalf("a fourth login from one /64: %d", r.status)
	}
	if r := login("v4", "[2001:db8:1:3::1]:5000"); r.status != http.StatusOK {
		t.Fatalf("another /64: %d", r.status)
	}
	if r := login("v5", "[::ffff:10.0.0.1]:5000"); r.status != http.StatusTooManyRequests {
		t.Fatalf("10.0.0.1 mapped into IPv6 escaped its spent budget: %d", r.status)
	}

	// Bad bodies are still the handler's to answer, and still count for the IP.
	big := `{"user":"` + strings.Repeat("a", maxBody) + `"}`
	if r := a.send("POST", "/api/login", "", big, "10.0.3.1:1"); r.status != http.StatusRequestEntityTooLarge || r.header.Get("RateLimit-Remaining") != "2" {
		t.Fatalf("oversized login: %d %s %v", r.status, r.code, r.header)
	}
	if r := a.send("POST", "/api/login", "", `{"user":`, "10.0.3.1:1"); r.status != http.StatusBadRequest {
		t.Fatalf("malformed login: %d %s", r.status, r.code)
	}
	if r := a.send("POST", "/api/login", "", `{"user":"ok","extra":1}`, "10.0.3.1:1"); r.status != http.StatusBadRequest {
		t.Fatalf("unknown field: %d %s", r.status, r.code)
	}

	// Behind a configured proxy, each forwarded client has its own budget.
	env["FLASHSALE_TRUSTED_PROXIES"] = "10.9.0.0/16"
	b := newLimitedAPI(t, env)
	for i := 0; i < 5; i++ {
		r := b.send("POST", "/api/login", "", fmt.Sprintf(`{"user":"p%d"}`, i), "10.9.0.1:5000",
			"X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
		if r.status != http.StatusOK {
			t.Fatalf("forwarded client %d: %d", i, r.status)
		}
	}
}

// TestLimitPoliciesReload: a new configuration replaces the policies while serving.
func TestLimitPoliciesReload(t *testing.T) {
	a := newLimitedAPI(t, map[string]string{"FLASHSALE_LIMIT_PAY": "1/1m:1"})
	tok := a.token("dora")
	pay := func() limitReply { return a.send("POST", "/api/orders/x.1/pay", tok, "", "") }
	if r := pay(); r.status != http.StatusNotFound {
		t.Fatalf("first: %d", r.status)
	}
	if r := pay(); r.status != http.StatusTooManyRequests {
		t.Fatalf("second: %d", r.status)
	}
	if err := a.lim.SetPolicies(RatePolicies(optionsOf(limitConfig(t, map[string]string{"FLASHSALE_LIMIT_PAY": "1/1m:4"})).Limits)); err != nil {
		t.Fatal(err)
	}
	if r := pay(); r.status != http.StatusNotFound || r.header.Get("RateLimit-Limit") != "4" {
		t.Fatalf("after reload to burst 4: %d %v", r.status, r.header)
	}
	if err := a.lim.SetPolicies(RatePolicies(optionsOf(limitConfig(t, map[string]string{"FLASHSALE_LIMIT_PAY": "off"})).Limits)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if r := pay(); r.status != http.StatusNotFound || r.header.Get("RateLimit-Limit") != "" {
			t.Fatalf("policy off: %d %v", r.status, r.header)
		}
	}
}

// TestLimitFailsClosed: with Redis unreachable, limited routes answer 503 unavailable and the
// handler never runs.
func TestLimitFailsClosed(t *testing.T) {
	_, keys := testenv.Redis(t)
	cfg := limitConfig(t, nil)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer dead.Close()
	lim, err := limits.NewLimiter(dead, keys, RatePolicies(optionsOf(cfg).Limits))
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Bool
	srv := New(Deps{Options: optionsOf(cfg), Auth: NewAuth(cfg.JWTSecret, cfg.AdminToken, cfg.TokenTTL), Limiter: lim})
	srv.Engine().POST("/test/limited", srv.Auth.requireUser, srv.limit(policyPay), func(c *gin.Context) { reached.Store(true) })
	a := &limitedAPI{t: t, srv: srv}
	tok := a.token("erin")
	for _, path := range []string{"/test/limited", "/api/login"} {
		r := a.send("POST", path, tok, `{"user":"erin"}`, "")
		if r.status != http.StatusServiceUnavailable || r.code != "unavailable" {
			t.Fatalf("%s with Redis down: %d %s", path, r.status, r.code)
		}
	}
	if reached.Load() {
		t.Fatal("a handler ran although the limiter could not decide")
	}
}

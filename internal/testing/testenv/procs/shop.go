package procs

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Shop drives the apis over HTTP as shoppers and an admin would, recording every call.
type Shop struct {
	t          testing.TB
	hc         *http.Client
	apis       func() []*Proc
	adminToken string

	mu     sync.Mutex
	tokens map[string]string
	calls  []*Call
	next   int // round-robin over the live apis (Any)
}

// Any sends a call to the next live api (not exited, not told to stop), round-robin.
const Any = -1

// NewShop returns a shop calling the apis apis returns (asked at every call, so apis started
// later count), with adminToken for the admin routes; a call without an answer after timeout
// is recorded as a transport error.
func NewShop(t testing.TB, adminToken string, timeout time.Duration, apis func() []*Proc) *Shop {
	return &Shop{t: t, adminToken: adminToken, apis: apis, tokens: map[string]string{},
		hc: &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
}

// Call is one client call and what it learnt.
type Call struct {
	Kind, User, Item, Key string
	API                   int // the api's index, or Any
	Status                int // 0: a transport error (no answer)
	Code, Message         string
	OrderID, OrderStatus  string
	Started               time.Time
	Took                  time.Duration
}

// Unknown reports whether the caller cannot know whether the call changed anything.
func (c *Call) Unknown() bool {
	return c.Status == 0 || c.Status == 500 || (c.Status == 503 && strings.Contains(c.Message, "outcome is unknown"))
}

// base is the URL of api number api, or of the next live one (Any).
func (sh *Shop) base(api int) string {
	apis := sh.apis()
	if api != Any {
		return apis[api].URL
	}
	var live []*Proc
	for _, p := range apis {
		if !p.Exited() && !p.leaving.Load() {
			live = append(live, p)
		}
	}
	if len(live) == 0 { // every api has exited: the request fails and is recorded as such
		return apis[0].URL
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.next++
	return live[sh.next%len(live)].URL
}

// Do sends one request to api (an index, or Any) and decodes a JSON answer.
func (sh *Shop) Do(api int, method, path, token, key, ctype string, body []byte) (int, map[string]any, error) {
	req, _ := http.NewRequest(method, sh.base(api)+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := sh.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

// JSON sends body (nil: none) as JSON.
func (sh *Shop) JSON(api int, method, path, token, key string, body any) (int, map[string]any, error) {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	return sh.Do(api, method, path, token, key, "application/json", b)
}

// Admin sends an admin request to any api and fails the test unless it answers 2xx.
func (sh *Shop) Admin(method, path string, body any) map[string]any {
	sh.t.Helper()
	status, out, err := sh.JSON(Any, method, path, sh.adminToken, "", body)
	if err != nil || status >= 300 {
		sh.t.Fatalf("admin %s %s: %d %v %v", method, path, status, out, err)
	}
	return out
}

// PutItem creates or replaces an item with the given stock and per-user limit.
func (sh *Shop) PutItem(id string, stock, limit int) {
	sh.t.Helper()
	sh.Admin("PUT", "/api/admin/items/"+id, map[string]any{"name": "Item " + id, "category": "c",
		"price_cents": 999, "stock": stock, "per_user_limit": limit})
}

// Login mints tokens for the users through the apis in turn, 32 at a time. A login that fails
// is tried again (a fault may be on) for up to a minute, then fails the test.
func (sh *Shop) Login(users []string) {
	sh.t.Helper()
	Parallel(32, users, func(u string) {
		deadline := time.Now().Add(time.Minute)
		for {
			status, out, err := sh.JSON(Any, "POST", "/api/login", "", "", map[string]string{"user": u})
			if tok, ok := out["token"].(string); err == nil && status == 200 && ok {
				sh.mu.Lock()
				sh.tokens[u] = tok
				sh.mu.Unlock()
				return
			}
			if time.Now().After(deadline) {
				sh.t.Errorf("login %s: %d %v %v", u, status, out, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if sh.t.Failed() {
		sh.t.FailNow()
	}
}

// Token is the user's token from Login.
func (sh *Shop) Token(u string) string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.tokens[u]
}

// Calls returns every call recorded so far.
func (sh *Shop) Calls() []*Call {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return append([]*Call(nil), sh.calls...)
}

// record fills c from an answer and keeps it.
func (sh *Shop) record(c *Call, status int, out map[string]any, err error) *Call {
	c.Took = time.Since(c.Started)
	c.Status = status
	if err != nil {
		c.Message = err.Error()
	}
	if e, ok := out["error"].(map[string]any); ok {
		c.Code, _ = e["code"].(string)
		c.Message, _ = e["message"].(string)
	}
	if o, ok := out["order"].(map[string]any); ok {
		c.OrderID, _ = o["id"].(string)
		c.OrderStatus, _ = o["status"].(string)
	}
	sh.mu.Lock()
	sh.calls = append(sh.calls, c)
	sh.mu.Unlock()
	return c
}

// Buy is one purchase (quantity 1) through api; with a key, a call whose outcome is unknown is
// sent again with the same key, as the shopper page does, up to 5 times.
func (sh *Shop) Buy(api int, user, item, key string) *Call {
	for attempt := 0; ; attempt++ {
		c := &Call{Kind: "purchase", User: user, Item: item, Key: key, API: api, Started: time.Now()}
		status, out, err := sh.JSON(api, "POST", "/api/items/"+item+"/purchase", sh.Token(user), key, map[string]int{"quantity": 1})
		sh.record(c, status, out, err)
		if key == "" || !c.Unknown() || attempt == 4 {
			return c
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// BuyPatiently is one purchase (quantity 1) with an Idempotency-Key that a shopper sends again
// with the same key after every 503 or call of unknown outcome, as long as within allows: what
// a shopper does while Redis fails over. Every attempt is recorded.
func (sh *Shop) BuyPatiently(api int, user, item, key string, within time.Duration) *Call {
	deadline := time.Now().Add(within)
	for {
		c := &Call{Kind: "purchase", User: user, Item: item, Key: key, API: api, Started: time.Now()}
		status, out, err := sh.JSON(api, "POST", "/api/items/"+item+"/purchase", sh.Token(user), key, map[string]int{"quantity": 1})
		sh.record(c, status, out, err)
		if (c.Status != 503 && !c.Unknown()) || time.Now().After(deadline) {
			return c
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Order pays or cancels (kind) an order through api.
func (sh *Shop) Order(api int, kind, user, id string) *Call {
	c := &Call{Kind: kind, User: user, API: api, Started: time.Now()}
	status, out, err := sh.JSON(api, "POST", "/api/orders/"+id+"/"+kind, sh.Token(user), "", nil)
	return sh.record(c, status, out, err)
}

// Restock adds delta units of item through api.
func (sh *Shop) Restock(api int, item string, delta int) *Call {
	c := &Call{Kind: "restock", Item: item, API: api, Started: time.Now()}
	status, out, err := sh.JSON(api, "POST", "/api/admin/items/"+item+"/stock", sh.adminToken, "", map[string]int{"delta": delta})
	return sh.record(c, status, out, err)
}

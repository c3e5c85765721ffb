package httpapi_test

import (
	"net/http"
	"regexp"
	"testing"
)

// goWords are traces of Go in a message: a type name, a package, encoding/json's own prefix.
var goWords = regexp.MustCompile(`Go (struct|value)|int64|float64|\bstruct\b|json\.|httpapi|inventory\.|\[\]|RawMessage|^json: `)

// A 400's message speaks the contract's words (the field and what it must be), never
// Go's: encoding/json's "cannot unmarshal string into Go struct field .quantity of type int64"
// tells a client about our code, not about its request.
func TestBadRequestMessagesInContractWords(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("phone", 5, 2)
	tok := a.token("alice")
	item := `"name":"Phone","category":"phones","price_cents":1,"stock":1,"per_user_limit":1`
	cases := []struct {
		name, method, path, token, body, contentType string
		want                                         string // a regexp the message must match
	}{
		{"quantity a string", "POST", "/api/items/phone/purchase", tok, `{"quantity":"two"}`, "", `quantity must be an integer`},
		{"quantity a fraction", "POST", "/api/items/phone/purchase", tok, `{"quantity":1.5}`, "", `quantity must be an integer`},
		{"quantity out of range", "POST", "/api/items/phone/purchase", tok, `{"quantity":99999999999999999999}`, "", `quantity must be an integer`},
		{"body an array", "POST", "/api/items/phone/purchase", tok, `[1]`, "", `^expected an object`},
		{"body a string", "POST", "/api/items/phone/purchase", tok, `"x"`, "", `^expected an object`},
		{"body a number", "PUT", "/api/admin/items/x0", testAdminToken, `5`, "", `^expected an object`},
		{"empty body", "PUT", "/api/admin/items/x6", testAdminToken, ``, "", `^empty body`},
		{"blank body", "POST", "/api/admin/items/phone/stock", testAdminToken, " \n", "", `^empty body`},
		{"unknown field", "POST", "/api/items/phone/purchase", tok, `{"quantity":1,"colour":"red"}`, "", `^unknown field "colour"$`},
		{"unknown item field", "PUT", "/api/admin/items/x4", testAdminToken, `{` + item + `,"picture":"x"}`, "", `^unknown field "picture"$`},
		{"unknown queue field", "PUT", "/api/admin/items/x5", testAdminToken, `{` + item + `,"queue":{"admit_per_second":1,"max_active":1,"pass_ttl_seconds":1,"burst":2}}`, "", `^unknown field "burst"$`},
		{"empty import", "POST", "/api/admin/items/import", testAdminToken, ``, "", `^empty body`},
		{"empty CSV import", "POST", "/api/admin/items/import", testAdminToken, ``, "text/csv", `^empty body`},
		{"truncated", "POST", "/api/items/phone/purchase", tok, `{"quantity":`, "", `malformed JSON`},
		{"stars a bool", "POST", "/api/items/phone/rating", tok, `{"stars":true}`, "", `stars must be an integer`},
		{"name a number", "PUT", "/api/admin/items/x1", testAdminToken, `{"name":5,"category":"c","price_cents":1,"stock":1,"per_user_limit":1}`, "", `name must be a string`},
		{"queue a string", "PUT", "/api/admin/items/x2", testAdminToken, `{` + item + `,"queue":"big"}`, "", `queue must be an object`},
		{"queue field a string", "PUT", "/api/admin/items/x3", testAdminToken, `{` + item + `,"queue":{"admit_per_second":"many","max_active":1,"pass_ttl_seconds":10}}`, "", `queue.admit_per_second must be an integer`},
		{"delta a string", "POST", "/api/admin/items/phone/stock", testAdminToken, `{"delta":"5"}`, "", `delta must be an integer`},
		{"login user a number", "POST", "/api/login", "", `{"user":5}`, "", `user must be a string`},
		{"import not an array", "POST", "/api/admin/items/import", testAdminToken, `{"id":"x"}`, "", `JSON array of items`},
		{"import truncated", "POST", "/api/admin/items/import", testAdminToken, `[{"id":"x"`, "", `JSON array of items`},
	}
	for _, c := range cases {
		var headers []string
		if c.contentType != "" {
			headers = []string{"Content-Type", c.contentType}
		}
		r := a.do(c.method, c.path, c.token, c.body, headers...)
		e, _ := r.Body["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if r.Status != http.StatusBadRequest || r.code() != "invalid_request" {
			t.Errorf("%s: %d %s, want 400 invalid_request", c.name, r.Status, r.Raw)
			continue
		}
		if goWords.MatchString(msg) || !regexp.MustCompile(c.want).MatchString(msg) {
			t.Errorf("%s: message %q, want the contract's words matching %q", c.name, msg, c.want)
		}
	}
	// An import row's message too.
	r := a.do("POST", "/api/admin/items/import", testAdminToken, `[{"id":"r1",`+item+`},{"id":"r2","name":["x"],"category":"c","price_cents":1,"per_user_limit":1}]`)
	errs, _ := r.Body["errors"].([]any)
	if r.Status != http.StatusOK || len(errs) != 1 {
		t.Fatalf("import with a bad row: %s", r.Raw)
	}
	if msg := errs[0].(map[string]any)["message"].(string); goWords.MatchString(msg) || !regexp.MustCompile(`name must be a string`).MatchString(msg) {
		t.Errorf("import row message %q, want the contract's words", msg)
	}
	r = a.do("POST", "/api/admin/items/import", testAdminToken, `[{"id":"r3",`+item+`,"colour":"red"},5]`)
	errs, _ = r.Body["errors"].([]any)
	if len(errs) != 2 || errs[0].(map[string]any)["message"] != `unknown field "colour"` ||
		!regexp.MustCompile(`^expected an object`).MatchString(errs[1].(map[string]any)["message"].(string)) {
		t.Errorf("import rows with an unknown field and a non-object: %s", r.Raw)
	}
}

// pkgPrefix is a Go package's name at the head of a message ("orders: cancel a.1: ...").
var pkgPrefix = regexp.MustCompile(`^(orders|inventory|queue|ranking|payment|limits|record|httpapi|exactlyonce):`)

// TestConflictMessagesHaveNoPackagePrefix: a 409 wrapped by a domain package reads from the
// sentinel's own words on, keeping what follows (the order's state), never "orders: cancel".
func TestConflictMessagesHaveNoPackagePrefix(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("phone", 5, 2)
	tok := a.token("alice")
	r := a.do("POST", "/api/items/phone/purchase", tok, map[string]any{"quantity": 1})
	if r.Status != http.StatusCreated {
		t.Fatalf("purchase: %d %s", r.Status, r.Raw)
	}
	id := r.Body["order"].(map[string]any)["id"].(string)
	if r := a.do("POST", "/api/orders/"+id+"/cancel", tok, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	for _, path := range []string{"/api/orders/" + id + "/cancel", "/api/orders/" + id + "/pay", "/api/orders/nope.1/cancel"} {
		r := a.do("POST", path, tok, nil)
		msg, _ := r.Body["error"].(map[string]any)["message"].(string)
		if r.Status < 400 || pkgPrefix.MatchString(msg) || goWords.MatchString(msg) {
			t.Errorf("POST %s: %d message %q, want no package prefix", path, r.Status, msg)
		}
		if r.Status == http.StatusConflict && msg != "order is not reserved (it is cancelled)" {
			t.Errorf("POST %s: message %q, want the state named", path, msg)
		}
	}
}

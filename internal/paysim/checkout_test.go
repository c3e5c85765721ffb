package paysim_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/paysim"
)

type page struct {
	status int
	header http.Header
	body   string
}

// browse GETs or POSTs (form) a page without following redirects.
func browse(t *testing.T, method, u string, form url.Values) page {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var res *http.Response
	var err error
	if method == http.MethodPost {
		res, err = client.PostForm(u, form)
	} else {
		res, err = client.Get(u)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return page{res.StatusCode, res.Header, string(b)}
}

var secretInput = regexp.MustCompile(`name="client_secret" value="([^"]+)"`)

// TestCheckoutPage: the hosted page shows the amount and the test cards, pays with the chosen
// one through a plain form (no script, strict CSP), shows a decline and lets the shopper try
// again, shows a processing payment until it succeeds, and links back to the shop.
func TestCheckoutPage(t *testing.T) {
	rc := newReceiver(t, "whsec_page", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_page"}, AsyncDelay: time.Hour})
	pi := createIntent(t, sim, "1234", "o-page")
	id := pi["id"].(string)
	base := sim.URL() + "/checkout/" + id

	p := browse(t, "GET", base+"?return_url=%2Fshop%2Forders", nil)
	if p.status != 200 || !strings.Contains(p.header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s", p.status, p.body)
	}
	csp := p.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe-inline") || strings.Contains(p.body, "<script") || strings.Contains(p.body, "style=") {
		t.Fatalf("page is not CSP-strict: %q", csp)
	}
	for _, want := range []string{"$12.34", "o-page", paysim.CardVisa, paysim.CardDeclined, paysim.CardAsync, `id="pay"`,
		`data-status="requires_payment_method"`, `id="return" href="/shop/orders"`, `href="/assets/checkout.css"`} {
		if !strings.Contains(p.body, want) {
			t.Fatalf("page lacks %q:\n%s", want, p.body)
		}
	}
	m := secretInput.FindStringSubmatch(p.body)
	if m == nil || m[1] != pi["client_secret"] {
		t.Fatalf("form without the client secret: %v", m)
	}
	if css := browse(t, "GET", sim.URL()+"/assets/checkout.css", nil); css.status != 200 || !strings.Contains(css.header.Get("Content-Type"), "text/css") {
		t.Fatalf("stylesheet: %d", css.status)
	}

	// A form without this payment's secret changes nothing.
	if r := browse(t, "POST", base, url.Values{"client_secret": {"forged"}, "payment_method": {paysim.CardVisa}}); r.status != 403 {
		t.Fatalf("forged form: %d", r.status)
	}
	// Declined, then shown with the form again.
	r := browse(t, "POST", base+"?return_url=%2Fshop%2Forders", url.Values{"client_secret": {m[1]}, "payment_method": {paysim.CardDeclined}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/checkout/"+id+"?return_url=%2Fshop%2Forders" {
		t.Fatalf("pay: %d %v", r.status, r.header)
	}
	p = browse(t, "GET", sim.URL()+r.header.Get("Location"), nil)
	if !strings.Contains(p.body, "Your card was declined.") || !strings.Contains(p.body, `id="pay-form"`) {
		t.Fatalf("after a decline:\n%s", p.body)
	}
	// Async: processing, the page refreshes itself; then succeeded, no form.
	browse(t, "POST", base, url.Values{"client_secret": {m[1]}, "payment_method": {paysim.CardAsync}})
	p = browse(t, "GET", base, nil)
	if !strings.Contains(p.body, `data-status="processing"`) || !strings.Contains(p.body, `http-equiv="refresh"`) || strings.Contains(p.body, `id="pay-form"`) {
		t.Fatalf("processing page:\n%s", p.body)
	}
	paysim.SettleAsync(sim, id)
	p = browse(t, "GET", base, nil)
	if !strings.Contains(p.body, "Payment succeeded") || strings.Contains(p.body, `id="pay-form"`) || strings.Contains(p.body, "refresh") {
		t.Fatalf("succeeded page:\n%s", p.body)
	}
	// Paying again changes nothing.
	browse(t, "POST", base, url.Values{"client_secret": {m[1]}, "payment_method": {paysim.CardVisa}})
	// A payment the shop refunded says so.
	if r := call(t, "POST", sim.URL()+"/v1/refunds", testKey, "", url.Values{"payment_intent": {id}}); r.status != 200 {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	if p := browse(t, "GET", base, nil); !strings.Contains(p.body, "Payment refunded") || strings.Contains(p.body, "Payment succeeded") {
		t.Fatalf("refunded page:\n%s", p.body)
	}
	waitFor(t, "webhooks", drained(sim))
	if n := len(rc.accepted("payment_intent.succeeded")); n != 1 || len(rc.accepted("payment_intent.payment_failed")) != 1 || len(rc.accepted("charge.refunded")) != 1 {
		t.Fatalf("events %v", rc.accepted(""))
	}
	if p := browse(t, "GET", sim.URL()+"/checkout/pi_nope", nil); p.status != 404 {
		t.Fatalf("unknown payment: %d", p.status)
	}
}

// TestCheckoutReturnURL: only a relative URL or one on the page's own host name (any port) or
// a configured host is linked; anything else is refused.
func TestCheckoutReturnURL(t *testing.T) {
	sim := start(t, paysim.Config{ReturnHosts: []string{"shop.example"}})
	id := createIntent(t, sim, "100", "o-ret")["id"].(string)
	for ret, ok := range map[string]bool{
		"/orders":                      true,
		"orders?x=1":                   true,
		"http://127.0.0.1:8080/orders": true,
		"https://shop.example/thanks":  true,
		"https://evil.example/":        false,
		"//evil.example/x":             false,
		"javascript:alert(1)":          false,
		"http://user@127.0.0.1/":       false,
		"/\\evil.example":              false,
	} {
		p := browse(t, "GET", sim.URL()+"/checkout/"+id+"?"+url.Values{"return_url": {ret}}.Encode(), nil)
		if ok != (p.status == 200) {
			t.Errorf("return_url %q: %d", ret, p.status)
		}
	}
}

package paysim

import (
	"crypto/subtle"
	_ "embed" // the page and its stylesheet
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// The hosted checkout page works without any script: the card choice is a form posted back to
// the simulator (its hidden client_secret doubles as the CSRF token), which confirms and
// redirects (303) to the page showing the result. It loads only its own stylesheet, so it keeps
// a strict Content-Security-Policy; a payment still processing refreshes itself every second.

//go:embed checkout.css
var checkoutCSS []byte

//go:embed checkout.html
var checkoutHTML string

var checkoutTmpl = template.Must(template.New("checkout").Parse(checkoutHTML))

const checkoutCSP = "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func serveCSS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(checkoutCSS)
}

type cardChoice struct {
	ID, Label, Hint string
	Checked         bool
}

type checkoutView struct {
	ID, Action, Secret, Amount, OrderID, Status, Message, ReturnURL string
	Payable, Processing, Succeeded, Refunded, Canceled, Declined    bool
	Cards                                                           []cardChoice
}

// returnURL accepts a checkout page's return_url: a relative URL, or an http(s) URL on the
// page's own host name (any port: the shop's api and the simulator share a host) or on one of
// Config.ReturnHosts.
func (s *Server) returnURL(r *http.Request, raw string) (string, bool) {
	if raw == "" {
		return "", true
	}
	u, err := url.Parse(raw)
	if err != nil || strings.HasPrefix(raw, "//") || strings.ContainsAny(raw, "\\\r\n\t") {
		return "", false
	}
	if !u.IsAbs() && u.Host == "" && u.Scheme == "" {
		return u.String(), true
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.User != nil {
		return "", false
	}
	own := r.Host
	if h, _, err := net.SplitHostPort(own); err == nil {
		own = h
	}
	if strings.EqualFold(u.Hostname(), own) || slices.ContainsFunc(s.cfg.ReturnHosts, func(h string) bool { return strings.EqualFold(h, u.Hostname()) }) {
		return u.String(), true
	}
	return "", false
}

func pageHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", checkoutCSP)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
}

func pageError(w http.ResponseWriter, status int, msg string) {
	pageHeaders(w)
	http.Error(w, msg, status)
}

func (s *Server) checkoutPage(w http.ResponseWriter, r *http.Request) {
	ret, ok := s.returnURL(r, r.URL.Query().Get("return_url"))
	if !ok {
		pageError(w, http.StatusBadRequest, "return_url must be a relative URL or one on this host")
		return
	}
	id := r.PathValue("id")
	s.mu.Lock()
	pi := s.intents[id]
	var v *intentJSON
	refunded := false
	if pi != nil {
		v = pi.view()
		if ch := s.charges[pi.latestCharge]; ch != nil && ch.status == StatusSucceeded && ch.refunded > 0 {
			refunded = true
		}
	}
	s.mu.Unlock()
	if v == nil {
		pageError(w, http.StatusNotFound, "no such payment")
		return
	}
	action := "/checkout/" + url.PathEscape(id)
	if ret != "" {
		action += "?" + url.Values{"return_url": {ret}}.Encode()
	}
	view := checkoutView{
		ID: v.ID, Action: action, Secret: v.ClientSecret, Amount: formatAmount(v.Amount, v.Currency),
		OrderID: v.Metadata["order_id"], Status: v.Status, ReturnURL: ret,
		Payable:    v.Status == StatusRequiresPaymentMethod,
		Processing: v.Status == StatusProcessing,
		Succeeded:  v.Status == StatusSucceeded && !refunded,
		Refunded:   refunded,
		Canceled:   v.Status == StatusCanceled,
		Declined:   v.Status == StatusRequiresPaymentMethod && v.LastPaymentError != nil,
		Cards: []cardChoice{
			{ID: CardVisa, Label: "Visa •••• 4242", Hint: "succeeds", Checked: true},
			{ID: CardDeclined, Label: "Visa •••• 0002", Hint: "declined by the bank"},
			{ID: CardAsync, Label: "Bank debit (slow)", Hint: fmt.Sprintf("succeeds after %s", s.cfg.AsyncDelay)},
			{ID: CardDispute, Label: "Visa •••• 0259", Hint: "succeeds, then the holder disputes it"},
		},
	}
	if view.Declined {
		view.Message = v.LastPaymentError.Message
	}
	pageHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := checkoutTmpl.Execute(w, view); err != nil {
		s.log.Error("paysim: checkout page", "err", err)
	}
}

// checkoutPay confirms the payment with the chosen card and sends the browser back to the page.
func (s *Server) checkoutPay(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		pageError(w, http.StatusBadRequest, "bad form")
		return
	}
	ret, ok := s.returnURL(r, r.URL.Query().Get("return_url"))
	if !ok {
		pageError(w, http.StatusBadRequest, "return_url must be a relative URL or one on this host")
		return
	}
	id := r.PathValue("id")
	pm := r.PostForm.Get("payment_method")
	s.mu.Lock()
	pi := s.intents[id]
	if pi == nil {
		s.mu.Unlock()
		pageError(w, http.StatusNotFound, "no such payment")
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("client_secret")), []byte(pi.secret)) != 1 {
		s.mu.Unlock()
		pageError(w, http.StatusForbidden, "this form does not belong to this payment")
		return
	}
	if _, known := cardOutcome[pm]; !known {
		s.mu.Unlock()
		pageError(w, http.StatusBadRequest, "choose a card")
		return
	}
	// A second click (or a reload) on a payment no longer payable changes nothing: the page
	// shows the payment as it is.
	_, _, evts := s.confirmLocked(pi, pm)
	s.mu.Unlock()
	s.hooks.enqueue(evts)
	back := "/checkout/" + url.PathEscape(id)
	if ret != "" {
		back += "?" + url.Values{"return_url": {ret}}.Encode()
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

var zeroDecimal = []string{"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"}

func formatAmount(amount int64, currency string) string {
	cur := strings.ToUpper(currency)
	if slices.Contains(zeroDecimal, currency) {
		return fmt.Sprintf("%d %s", amount, cur)
	}
	sym := map[string]string{"usd": "$", "eur": "€", "gbp": "£"}[currency]
	if sym != "" {
		return fmt.Sprintf("%s%d.%02d", sym, amount/100, amount%100)
	}
	return fmt.Sprintf("%d.%02d %s", amount/100, amount%100, cur)
}

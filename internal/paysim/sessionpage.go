package paysim

import (
	"context"
	"crypto/subtle"
	_ "embed" // the page
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// The Checkout Session's hosted page, like Stripe Checkout's: the amount, the test cards as
// a plain form posted back to the page's own URL (its hidden session token doubles as the
// CSRF token), no script and a strict Content-Security-Policy. Paying sends the browser to the
// session's success_url; a declined card comes back to the page, which says so.

//go:embed session.html
var sessionHTML string

var sessionTmpl = template.Must(template.New("session").Parse(sessionHTML))

type sessionView struct {
	ID, Action, Token, Amount, Name, OrderID, Status, Message, CancelURL string
	Payable, Complete, Expired, Declined                                 bool
	Cards                                                                []cardChoice
}

func (s *Server) sessionPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	cs := s.sessions[id]
	var v sessionView
	formAction := "'self'"
	if cs != nil {
		if u, err := url.Parse(cs.successURL); err == nil {
			// The form's answer redirects there: CSP's form-action covers that redirect too.
			formAction += " " + u.Scheme + "://" + u.Host
		}
		v = sessionView{
			ID: cs.id, Action: "/c/pay/" + url.PathEscape(cs.id), Token: cs.secret,
			Amount: formatAmount(cs.unitAmount*cs.quantity, cs.currency), Name: cs.name,
			OrderID: cs.metadata["order_id"], Status: cs.status, CancelURL: cs.cancelURL,
			Payable: cs.status == SessionOpen, Complete: cs.status == SessionComplete, Expired: cs.status == SessionExpired,
		}
		if pi := s.intents[cs.intent]; pi != nil && cs.status == SessionOpen && pi.lastError != nil {
			v.Declined, v.Message = true, pi.lastError.Message
		}
	}
	s.mu.Unlock()
	if cs == nil {
		pageError(w, http.StatusNotFound, "no such checkout")
		return
	}
	v.Cards = []cardChoice{
		{ID: CardVisa, Label: "Visa •••• 4242", Hint: "succeeds", Checked: true},
		{ID: CardDeclined, Label: "Visa •••• 0002", Hint: "declined by the bank"},
		{ID: CardAsync, Label: "Slow card", Hint: fmt.Sprintf("processing, succeeds after %s", s.cfg.AsyncDelay)},
	}
	pageHeaders(w)
	w.Header().Set("Content-Security-Policy", strings.Replace(checkoutCSP, "form-action 'self'", "form-action "+formAction, 1))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := sessionTmpl.Execute(w, v); err != nil {
		s.log.Error("paysim: session page", "err", err)
	}
}

// sessionPay submits the page: a completed session sends the browser to its success_url, any
// other outcome back to the page (a decline, a second submit of a session no longer open).
func (s *Server) sessionPay(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		pageError(w, http.StatusBadRequest, "bad form")
		return
	}
	id := r.PathValue("id")
	pm := r.PostForm.Get("payment_method")
	s.mu.Lock()
	cs := s.sessions[id]
	if cs == nil {
		s.mu.Unlock()
		pageError(w, http.StatusNotFound, "no such checkout")
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("session_token")), []byte(cs.secret)) != 1 {
		s.mu.Unlock()
		pageError(w, http.StatusForbidden, "this form does not belong to this checkout")
		return
	}
	if _, known := cardOutcome[pm]; !known {
		s.mu.Unlock()
		pageError(w, http.StatusBadRequest, "choose a card")
		return
	}
	done, evts := s.paySessionLocked(cs, pm)
	target := "/c/pay/" + url.PathEscape(id)
	if done {
		target = cs.successTarget()
	}
	s.mu.Unlock()
	s.hooks.enqueue(evts)
	http.Redirect(w, r, target, http.StatusSeeOther)
}

var sessionTokenInput = regexp.MustCompile(`name="session_token" value="([^"]+)"`)

// PaySession pays a session on its hosted page (checkoutURL, the session's url) with one of
// the test payment methods, as a shopper's browser would: it reads the page, submits its
// form, and returns where the page sent the browser (the session's success_url once
// complete, the page again after a decline). For tests and load tools.
func PaySession(ctx context.Context, checkoutURL, paymentMethod string) (string, error) {
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, checkoutURL, nil)
	if err != nil {
		return "", err
	}
	res, err := client.Do(req)
	if err != nil {
		return "", err
	}
	page, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	if err != nil {
		return "", err
	}
	m := sessionTokenInput.FindSubmatch(page)
	if res.StatusCode != http.StatusOK || m == nil {
		return "", fmt.Errorf("paysim: checkout page %s: %d, no payment form", checkoutURL, res.StatusCode)
	}
	form := url.Values{"session_token": {string(m[1])}, "payment_method": {paymentMethod}}
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, checkoutURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if res, err = client.Do(req); err != nil {
		return "", err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		return "", fmt.Errorf("paysim: paying on %s: %d", checkoutURL, res.StatusCode)
	}
	return res.Header.Get("Location"), nil
}

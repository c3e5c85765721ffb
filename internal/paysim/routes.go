package paysim

import (
	"net/http"
)

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Paysim", "1")
		writeRaw(w, http.StatusOK, []byte(`{"object":"health","simulator":"paysim","ok":true}`+"\n"))
	})
	m.Handle("POST /v1/checkout/sessions", s.api(s.createSession, secretKeyOnly))
	m.Handle("GET /v1/checkout/sessions", s.api(s.listSessions, secretKeyOnly))
	m.Handle("GET /v1/checkout/sessions/{id}", s.api(s.getSession, secretKeyOnly))
	m.Handle("POST /v1/checkout/sessions/{id}/expire", s.api(s.expireSessionAPI, secretKeyOnly))
	m.Handle("POST /v1/payment_intents", s.api(s.createIntent, secretKeyOnly))
	m.Handle("GET /v1/payment_intents", s.api(s.listIntents, secretKeyOnly))
	m.Handle("GET /v1/payment_intents/{id}", s.api(s.getIntent, keyOrClientSecret))
	m.Handle("POST /v1/payment_intents/{id}/confirm", s.api(s.confirmIntent, keyOrClientSecret))
	m.Handle("POST /v1/payment_intents/{id}/cancel", s.api(s.cancelIntent, secretKeyOnly))
	m.Handle("POST /v1/refunds", s.api(s.createRefund, secretKeyOnly))
	m.Handle("GET /v1/refunds", s.api(s.listRefunds, secretKeyOnly))
	m.Handle("GET /v1/refunds/{id}", s.api(s.getRefund, secretKeyOnly))
	m.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeRaw(w, http.StatusNotFound, marshalReply(&apiError{Type: invalidRequest, Code: "resource_missing",
			Message: "Unrecognized request URL (" + r.Method + ": " + r.URL.Path + ")."}))
	})
	m.HandleFunc("GET /checkout/{id}", s.checkoutPage)
	m.HandleFunc("POST /checkout/{id}", s.checkoutPay)
	m.HandleFunc("GET /c/pay/{id}", s.sessionPage)
	m.HandleFunc("POST /c/pay/{id}", s.sessionPay)
	m.HandleFunc("GET /assets/checkout.css", serveCSS)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "paysim: no such page", http.StatusNotFound)
	})
	s.mux = m
}

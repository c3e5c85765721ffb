// Package paysim is a payment-provider simulator that speaks the subset of Stripe's API flashsale
// uses (payment intents, refunds, Idempotency-Key replay, a hosted checkout page, webhooks signed
// like Stripe's, delivered at least once), so stripe-go talks to it by its backend URL. It keeps
// its state in memory: for development, tests and load tests, never for real money.
package paysim

import (
	"container/list"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// APIVersion is the Stripe API version the simulator claims in its events (and in the
// Stripe-Version reply header): the one github.com/stripe/stripe-go/v85 pins, so its
// webhook.ConstructEvent accepts the events without IgnoreAPIVersionMismatch.
const APIVersion = "2026-03-25.dahlia"

// Defaults of Config.
const (
	DefaultAddr       = "127.0.0.1:8090"
	DefaultAsyncDelay = 5 * time.Second
	DefaultMaxObjects = 100_000
)

// Op names a change the simulator makes; Chaos.FailAfterWrite receives it.
type Op string

// The changes, as Chaos.FailAfterWrite sees them.
const (
	OpCreate  Op = "create"  // POST /v1/payment_intents
	OpConfirm Op = "confirm" // POST /v1/payment_intents/{id}/confirm
	OpCancel  Op = "cancel"  // POST /v1/payment_intents/{id}/cancel
	OpRefund  Op = "refund"  // POST /v1/refunds
	OpSession Op = "session" // POST /v1/checkout/sessions
)

// Config describes one simulator. The zero value works: a random key, no webhooks, a random
// signing secret, 5 s async delay, loopback only.
type Config struct {
	// APIKey is the shop's secret key: the objects made with it, and only those, send events
	// to WebhookURL. Any other "sk_test_…" key is accepted too, as an account of its own that
	// sees only its own objects (as another Stripe account would). Empty: a random key, see
	// Server.APIKey.
	APIKey string
	// WebhookURL receives the events of APIKey's objects (POST, JSON, Stripe-Signature).
	// Empty: events are made but not delivered (until Server.SetWebhookURL names one).
	WebhookURL string
	// Public lets Start listen on an address that is not loopback (a demo behind a proxy).
	Public bool
	// MaxObjects bounds the payment intents, charges, refunds and disputes kept (default
	// DefaultMaxObjects): the oldest finished payment goes first, with its charges and
	// refunds (counted in Stats.Evicted); when none is finished, creation answers 429.
	// It bounds the remembered Idempotency-Keys too.
	MaxObjects int
	// DisputeDelay is how long after a payment with pm_card_createDispute succeeds its charge
	// is disputed (default 1 s).
	DisputeDelay time.Duration
	// WebhookSecrets sign the events: the first one signs (put a new one first to rotate).
	// Empty: a random "whsec_…" secret, see Server.WebhookSecret.
	WebhookSecrets []string
	// AsyncDelay is how long a payment confirmed with pm_card_async stays "processing"
	// before it succeeds. Default 5 s.
	AsyncDelay time.Duration
	// EventAPIVersion is the api_version written into events. Default APIVersion.
	EventAPIVersion string
	// RetryMin and RetryMax bound the exponential backoff between delivery attempts of one
	// event (defaults 500 ms and 30 s); attempts go on until a 2xx or Close.
	RetryMin, RetryMax time.Duration
	// WebhookTimeout bounds one delivery attempt (default 10 s).
	WebhookTimeout time.Duration
	// QueueMax bounds the deliveries waiting or being attempted (default 100,000). A change
	// whose events do not fit waits for room before it is answered (backpressure), so no
	// event is ever dropped while the simulator runs.
	QueueMax int
	// Workers is the number of concurrent delivery attempts (default 8).
	Workers int
	// IdempotencyTTL is how long an Idempotency-Key's first reply is kept (default 24 h, as
	// at Stripe).
	IdempotencyTTL time.Duration
	// ReturnHosts are host names (besides the checkout page's own) that a checkout page's
	// return_url may point to.
	ReturnHosts []string
	// Chaos makes the simulator misbehave on purpose, for tests.
	Chaos Chaos
	// Logger receives delivery failures and the like (default slog.Default()).
	Logger *slog.Logger
	// HTTPClient delivers the webhooks (default: a client with WebhookTimeout).
	HTTPClient *http.Client
}

// Chaos are the ways the simulator misbehaves on purpose. The zero value is a well-behaved
// provider.
type Chaos struct {
	// Duplicates > 1: every event is delivered a random 1..Duplicates times (the copies
	// carry the same event id, each copy is retried until 2xx on its own).
	Duplicates int
	// ReorderWindow > 0: every delivery waits a random time in [0, ReorderWindow) before its
	// first attempt, so events overtake each other.
	ReorderWindow time.Duration
	// Delay > 0: every delivery waits this long before its first attempt (a late webhook).
	Delay time.Duration
	// FailAfterWriteRate in [0,1]: the share of changes (create, confirm, cancel, refund)
	// that are made and then answered 500 api_error, as a provider that fails after
	// charging. The 500 is what an Idempotency-Key replays afterwards.
	FailAfterWriteRate float64
	// FailAfterWrite, when set, decides the same per change (id: the payment intent's id);
	// it is asked in addition to the rate.
	FailAfterWrite func(op Op, id string) bool
}

// Server is one simulator: an http.Handler, plus Start/Close to run it on an address.
type Server struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	secrets []string

	mu           sync.Mutex
	intents      map[string]*intent
	charges      map[string]*charge
	refunds      map[string]*refund
	timers       map[string]*time.Timer // async payments still processing, disputes to come, open sessions' expiry
	order        *list.List             // every intent, oldest first: eviction looks here
	byOwner      map[string]*list.List  // each key's intents, oldest first: listings page here
	disputes     int                    // disputes kept (objects beside intents, charges, refunds)
	seq          int64                  // creation order of intents and refunds
	evicted      atomic.Int64
	sessions     map[string]*session
	sessionOrder *list.List // every session, oldest first: eviction looks here
	closed       bool
	idem         *idempotency
	hooks        *deliverer
	lifetime     context.Context
	stop         context.CancelFunc
	// closeIdle closes the webhook client's kept-alive connections at Close (nil when the
	// client is the caller's).
	closeIdle func()

	srvMu    sync.Mutex
	srv      *http.Server
	ln       net.Listener
	newConns map[net.Conn]bool // accepted, no request yet: Close closes them at once
}

// New makes a simulator with cfg; it delivers webhooks from now until Close.
func New(cfg Config) *Server {
	if cfg.AsyncDelay <= 0 {
		cfg.AsyncDelay = DefaultAsyncDelay
	}
	if cfg.APIKey == "" {
		cfg.APIKey = "sk_test_" + randomID(32)
	}
	if cfg.MaxObjects <= 0 {
		cfg.MaxObjects = DefaultMaxObjects
	}
	if cfg.DisputeDelay <= 0 {
		cfg.DisputeDelay = time.Second
	}
	if cfg.EventAPIVersion == "" {
		cfg.EventAPIVersion = APIVersion
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 500 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(30*time.Second, cfg.RetryMin)
	}
	if cfg.WebhookTimeout <= 0 {
		cfg.WebhookTimeout = 10 * time.Second
	}
	if cfg.QueueMax <= 0 {
		cfg.QueueMax = 100_000
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ownClient := false
	if cfg.HTTPClient == nil {
		// One kept-alive connection per worker, so that a storm of deliveries does not open
		// (and leave in TIME_WAIT) a connection per attempt.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = cfg.Workers
		cfg.HTTPClient = &http.Client{Timeout: cfg.WebhookTimeout, Transport: tr}
		ownClient = true
	}
	secrets := append([]string(nil), cfg.WebhookSecrets...)
	if len(secrets) == 0 {
		secrets = []string{"whsec_" + randomID(32)}
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{
		cfg:          cfg,
		log:          cfg.Logger.With("component", "paysim"),
		secrets:      secrets,
		intents:      map[string]*intent{},
		charges:      map[string]*charge{},
		refunds:      map[string]*refund{},
		sessions:     map[string]*session{},
		timers:       map[string]*time.Timer{},
		idem:         newIdempotency(cfg.IdempotencyTTL, cfg.MaxObjects),
		order:        list.New(),
		sessionOrder: list.New(),
		byOwner:      map[string]*list.List{},
		lifetime:     ctx,
		stop:         stop,
	}
	if ownClient {
		s.closeIdle = cfg.HTTPClient.CloseIdleConnections
	}
	s.hooks = newDeliverer(s)
	s.routes()
	return s
}

// SetWebhookURL changes where events go from now on (an api that listens on port 0 knows its
// own webhook URL only once it listens). Deliveries already queued go to the new URL too;
// events made while the URL is empty are not delivered.
func (s *Server) SetWebhookURL(u string) { s.hooks.url.Store(&u) }

// APIKey is the shop's secret key (Config.APIKey, or the random one made when none was
// given): only its objects send webhooks.
func (s *Server) APIKey() string { return s.cfg.APIKey }

// WebhookSecret is the secret that signs the webhooks (the first of Config.WebhookSecrets, or
// the random one made when none was given).
func (s *Server) WebhookSecret() string { return s.secrets[0] }

// ServeHTTP serves the Stripe subset under /v1/ and the checkout page under /checkout/.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Start listens on addr (port 0 picks a free one) and serves in the background until Close.
// An address already in use is an error that wraps ErrAddrInUse; one that is not loopback
// wraps ErrNotLoopback unless Config.Public.
func (s *Server) Start(addr string) error {
	if addr == "" {
		addr = DefaultAddr
	}
	if !s.cfg.Public && !Loopback(addr) {
		return fmt.Errorf("paysim: listen on %s: %w", addr, ErrNotLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("paysim: listen on %s: %w (%v)", addr, ErrAddrInUse, err)
		}
		return fmt.Errorf("paysim: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ConnState: s.trackConn}
	s.srvMu.Lock()
	if s.srv != nil {
		s.srvMu.Unlock()
		ln.Close()
		return errors.New("paysim: already started")
	}
	s.srv, s.ln = srv, ln
	s.srvMu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("paysim: serve", "err", err)
		}
	}()
	return nil
}

func (s *Server) trackConn(c net.Conn, st http.ConnState) {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if st == http.StateNew {
		if s.newConns == nil {
			s.newConns = map[net.Conn]bool{}
		}
		s.newConns[c] = true
	} else {
		delete(s.newConns, c)
	}
}

// ErrAddrInUse: Start found its address taken (maybe by another simulator; see Answering).
var ErrAddrInUse = errors.New("address already in use")

// ErrNotLoopback: Start was asked to listen beyond loopback without Config.Public.
var ErrNotLoopback = errors.New("not a loopback address (the simulator takes any test key: set public to listen beyond this host)")

// Loopback reports whether addr (host:port) names only this host: a loopback IP or
// "localhost". An empty host (every interface) is not loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr is the address Start listens on ("" before Start).
func (s *Server) Addr() string {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL is "http://<Addr>", the base URL for a Stripe client (empty before Start).
func (s *Server) URL() string {
	if a := s.Addr(); a != "" {
		return "http://" + a
	}
	return ""
}

// Answering reports whether a payment simulator (or anything that answers its health route
// GET /v1/health like one) already listens on addr, so that a second api on the host can use
// it instead of starting its own.
func Answering(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/health", nil)
	if err != nil {
		return false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	return res.StatusCode == http.StatusOK && res.Header.Get("X-Paysim") == "1"
}

// Close stops serving (if started), stops the async payments still processing and the webhook
// deliveries; events not yet delivered are lost with the simulator's memory.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for id, t := range s.timers {
		t.Stop()
		delete(s.timers, id)
	}
	s.mu.Unlock()
	s.stop()
	s.srvMu.Lock()
	srv := s.srv
	s.srvMu.Unlock()
	var err error
	if srv != nil {
		// Requests in flight finish; connections a client opened but never used would hold
		// Shutdown for 5 s, so they are closed at once.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		done := make(chan error, 1)
		go func() { done <- srv.Shutdown(ctx) }()
		s.srvMu.Lock()
		for c := range s.newConns {
			c.Close()
		}
		s.srvMu.Unlock()
		err = <-done
		cancel()
	}
	s.hooks.close()
	if s.closeIdle != nil {
		s.closeIdle()
	}
	return err
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randomID is n characters of [A-Za-z0-9] from crypto/rand: ids double as capabilities (the
// checkout page needs only the payment intent's id).
func randomID(n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2)
	for len(out) < n {
		_, _ = rand.Read(buf) // never fails (Go 1.24+)
		for _, c := range buf {
			if c < 248 && len(out) < n { // 248 = 4*62: no modulo bias
				out = append(out, idAlphabet[int(c)%len(idAlphabet)])
			}
		}
	}
	return string(out)
}

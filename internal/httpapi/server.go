// Package httpapi is flashsale's HTTP layer: the contract's routes on Gin, mapping domain
// errors to the contract's statuses and codes. Only this package knows about HTTP.
package httpapi

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/datamark"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/queue"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/stats"
)

// Options are the settings the HTTP layer needs (the app fills them from the configuration).
type Options struct {
	DevLogin         bool           // POST /api/login mints shopper tokens
	TrustedProxies   []string       // peers whose X-Forwarded-For is believed (validated by config)
	SnapshotInterval time.Duration  // how long encoded leaderboard replies are reused
	PurchaseLimit    limits.Policy  // shown in the purchase route's rate-limit headers
	Limits           RateLimits     // pay, cancel, rating and login
	Stream           StreamOptions  // GET /api/items/stream (zero: the contract's defaults)
	StatsKeys        keyspace.Space // where GET /api/admin/stats reads the monitor's series
	AccessLog        AccessLog      // which requests get an access log line, at which level
	PublicURL        string         // the shop's URL as shoppers reach it ("": the request's host)
}

// RateLimits are the policies the HTTP layer applies through the limiter.
type RateLimits struct {
	Pay, Cancel, Rating, LoginUser, LoginIP limits.Policy
	// Reads limits, per user and in this api's memory (limits.Local: no Redis call), the reads
	// that reach Redis: order reads and waiting-room polls not answered from memory.
	Reads limits.Policy
}

// Deps are what the handlers need. Optional parts (nil) leave their routes out.
type Deps struct {
	Options   Options
	Auth      *Auth
	Inventory *inventory.Store
	Orders    *orders.Store
	// Ready reports whether Redis answers and every script is loaded.
	Ready func(ctx context.Context) error
	// DataLost reports that Redis lost its data (a *datamark.Loss) until a restore: every
	// change (but a login) answers 503 "restore needed" meanwhile. Nil: never.
	DataLost func() error
	// Web holds the embedded pages (index.html, admin.html, assets/); nil serves none.
	Web fs.FS
	// Ranking keeps ratings and leaderboards.
	Ranking *ranking.Store
	// Limiter applies the rate-limit policies of pay, cancel, rating and login.
	Limiter *limits.Limiter
	// Reconciliation returns the latest batch reconciliation report (reads Postgres).
	Reconciliation func(ctx context.Context) (any, error)
	// ReconcileRuns returns the newest n reconciliation runs, newest first (reads Postgres).
	ReconcileRuns func(ctx context.Context, n int) (any, error)
	// SalesReport computes the post-sale report (reads Postgres).
	SalesReport func(ctx context.Context, f record.SalesFilter) (record.SalesReport, error)
	// Disputes returns the newest n disputed payments (reads Postgres).
	Disputes func(ctx context.Context, n int) ([]record.Dispute, error)
	// Metrics serves /metrics (Prometheus text format).
	Metrics http.Handler
	// Queue keeps the items' waiting rooms (nil: the queue routes answer no_queue).
	Queue *queue.Store
	// Stats counts requests and purchases for the sale monitor (nil: not counted); Redis is
	// where GET /api/admin/stats reads every instance's series (nil: it answers 503).
	Stats *stats.Recorder
	Redis redis.UniversalClient
	// Payments takes payment through the provider (nil or without a provider: the shop
	// settles outside, and POST /pay marks orders paid).
	Payments *payment.Service
}

// Server is the api's HTTP handler.
type Server struct {
	Deps
	engine    *gin.Engine
	access    accessLog        // observe writes it
	catalogue catalogueReplies // encoded GET /api/items bodies (catalogue.go)
	boards    boardReplies     // encoded leaderboard bodies (boards.go)
	stream    *streamHub       // GET /api/items/stream subscribers (stream.go)
	reads     *limits.Local    // Options.Limits.Reads (nil: off)
}

const (
	maxBody       = 64 << 10
	maxImportBody = 8 << 20
)

// New builds the Gin engine with every route of the contract.
func New(d Deps) *Server {
	gin.SetMode(gin.ReleaseMode)
	s := &Server{Deps: d, engine: gin.New(), stream: newStreamHub(d.Options.Stream)}
	s.access.AccessLog = d.Options.AccessLog
	if p := d.Options.Limits.Reads; !p.Off() {
		s.reads, _ = limits.NewLocal(p) // config.Parse validated it; an invalid one is off
	}
	// observe comes first so that it times and logs a request whose handler panicked too, after
	// requestID (inside it) recovered and answered 500 with the id.
	s.engine.Use(s.observe, s.requestID, checkItemID)
	if d.DataLost != nil {
		s.engine.Use(s.refuseWhileLost)
	}
	s.engine.HandleMethodNotAllowed = false
	// Gin trusts every proxy by default, which lets any client choose its rate-limit key with
	// X-Forwarded-For. Trust only the configured proxies (none when empty; config.Parse checked them).
	if err := s.engine.SetTrustedProxies(d.Options.TrustedProxies); err != nil {
		_ = s.engine.SetTrustedProxies(nil)
	}
	s.engine.NoRoute(func(c *gin.Context) { fail(c, errNoRoute) })
	s.routes()
	return s
}

// ServeHTTP makes Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.engine.ServeHTTP(w, r) }

// Engine exposes the Gin engine (route listing for the OpenAPI check, extra middleware).
func (s *Server) Engine() *gin.Engine { return s.engine }

func (s *Server) routes() {
	r := s.engine
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", s.readyz)

	r.GET("/metrics", s.metrics)

	api := r.Group("/api")
	api.GET("/openapi.json", s.openapi)
	api.POST("/login", noStore, s.limitLogin, s.login)
	api.GET("/items", s.listItems)
	api.GET("/items/stream", s.streamItems)
	api.GET("/items/:id", s.getItem)
	api.GET("/leaderboards/top-rated", s.topRated)
	api.GET("/leaderboards/best-sellers", s.bestSellers)

	// The purchase rate limit is folded into the purchase script (one round trip). The route
	// verifies its token like the shopper group, handing the user over directly (Auth.shopper).
	api.POST("/items/:id/purchase", noStore, s.Auth.shopper(s.purchase))
	api.GET("/items/:id/queue", noStore, s.Auth.shopper(s.pollQueue)) // a waiting room's polls: as hot
	shopper := api.Group("", noStore, s.Auth.requireUser)
	shopper.POST("/items/:id/rating", s.limit("rating"), s.rateItem)
	shopper.POST("/items/:id/queue", s.joinQueue)
	shopper.GET("/orders", s.listOrders)
	shopper.GET("/orders/:id", s.getOrder)
	shopper.POST("/orders/:id/pay", s.limit("pay"), s.payOrder)
	shopper.POST("/orders/:id/cancel", s.limit("cancel"), s.cancelOrder)
	shopper.POST("/orders/:id/checkout", s.needProvider, s.limit("pay"), s.checkout)
	api.POST("/payments/webhook", s.paymentWebhook) // signed by the provider, no bearer token

	admin := api.Group("/admin", noStore, s.Auth.requireAdmin)
	admin.GET("/items", s.adminItems)
	admin.PUT("/items/:id", s.putItem)
	admin.POST("/items/:id/archive", s.archiveItem)
	admin.POST("/items/:id/stock", s.adjustStock)
	admin.POST("/items/import", s.importItems)
	admin.GET("/items/:id/queue", s.queueStats)
	admin.GET("/reconciliation", s.reconciliationReport)
	admin.GET("/reconciliation/runs", s.reconciliationRuns)
	admin.GET("/stats", s.adminStats)
	admin.GET("/reports/sales", s.salesReport)
	admin.POST("/orders/:id/refund", s.refundOrder)
	admin.GET("/payments/disputes", s.disputes)

	if s.Web != nil {
		s.webRoutes()
	}
}

var noStoreValue = []string{"no-store"}

// noStore marks a reply that belongs to one shopper or admin (orders, tickets and passes,
// tokens, admin data): no shared cache or browser may keep it. Set before the handler runs, so
// every answer of the route carries it, errors included.
func noStore(c *gin.Context) { c.Writer.Header()["Cache-Control"] = noStoreValue }

func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	if s.Ready != nil {
		if err := s.Ready(ctx); err != nil {
			// The cause (addresses, server errors) is for operators' logs, not the public; a
			// named check's reason (datamark's "redis_data_lost: ...") is the message.
			slog.Warn("not ready", "request_id", requestIDOf(c), "err", err)
			var loss *datamark.Loss
			if errors.As(err, &loss) {
				fail(c, &apiError{http.StatusServiceUnavailable, "unavailable", loss.Error()})
				return
			}
			fail(c, errNotReady)
			return
		}
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}

// refuseWhileLost answers every change 503 "restore needed" while Redis has lost its data
// (Deps.DataLost): a purchase, payment or admin write on the data Redis has left would sell
// stock the record has already sold. Reads, logins and the probes go on.
func (s *Server) refuseWhileLost(c *gin.Context) {
	switch c.Request.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return
	}
	if c.Request.URL.Path == "/api/login" {
		return
	}
	if err := s.DataLost(); err != nil {
		fail(c, errRestoreNeeded)
	}
}

func (s *Server) login(c *gin.Context) {
	if !s.Options.DevLogin {
		fail(c, errNoRoute)
		return
	}
	var body struct {
		User string `json:"user"`
	}
	if err := decodeJSON(c, maxBody, &body); err != nil {
		fail(c, err)
		return
	}
	if !validUser(body.User) {
		fail(c, errInvalid("user must match [A-Za-z0-9_-]{1,64}"))
		return
	}
	tok, exp, err := s.Auth.Mint(body.User)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"token": tok, "user": body.User, "expires_at": exp.Format(time.RFC3339)})
}

func validUser(u string) bool { return keyspace.ValidID(u) }

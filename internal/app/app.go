// Package app wires both binaries: the api (Redis, the stores, the HTTP server, the background
// loops, the relay, the embedded broker), which the tests build with the same constructor, and
// the reconciler (the record, the consumer, the jobs, the Reconciler). cmd/api and
// cmd/reconciler parse commands and settings around it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/crashpoint"
	"github.com/flashsale/flashsale/internal/datamark"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/kafkaconn"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/outbox"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/queue"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/stats"
	"github.com/flashsale/flashsale/web"
)

// API is the whole api process. New connects and builds everything; Run serves until its
// context ends and returns once every goroutine it started has stopped; Close releases the
// connections (also after a failed New).
type API struct {
	cfg config.Config

	rdb        redis.UniversalClient
	record     *record.Queries
	broker     *kafkabroker.Broker // nil with KAFKA_BROKERS
	kafkaLogin kafkaconn.Security  // towards KAFKA_BROKERS or the embedded broker
	conns      ConnCaps            // the HTTP listener's
	writer     *kafka.Writer
	transports []*kafka.Transport // closed by Close
	relay      *outbox.Relay
	expirer    *orders.Expirer
	stats      *stats.Recorder
	lag        *lagGauge
	marks      *datamark.Watch
	server     *httpapi.Server
	Inventory  *inventory.Store
	Orders     *orders.Store
	Ranking    *ranking.Store
	Queue      *queue.Store
	Payments   *payment.Service
	closers    []func() // closed by Close, last first (the payment simulator)

	stopping  atomic.Bool                                // shutting down: /readyz answers 503
	drainWait func(ctx context.Context, d time.Duration) // tests: the drain's wait

	closeOnce sync.Once
}

// New builds the api from cfg. It needs Redis (and scripts loaded); Postgres and Kafka are
// dialled on first use, so the api starts and sells without them.
func New(ctx context.Context, cfg config.Config) (_ *API, err error) {
	a := &API{cfg: cfg}
	defer func() { // not the named result: every failing return below sets that to nil
		if err != nil {
			a.Close()
		}
	}()
	a.rdb, err = awaitRedis(ctx, cfg)
	if err != nil {
		return nil, err
	}
	metrics.InstrumentRedis(a.rdb) // script calls and latency by script name
	if err = exactlyonce.Load(ctx, a.rdb); err != nil {
		return nil, err
	}

	keys := keyspace.Space{Prefix: cfg.RedisPrefix}
	a.marks = datamark.NewWatch(a.rdb, keys)
	metrics.RedisDataLost.From(func() bool { return a.marks.Lost() != nil })
	a.Inventory = inventory.NewStore(a.rdb, keys, inventory.Options{
		Admit:            func() error { return a.relay.Admit() }, // the outbox bound
		ReservationTTL:   cfg.ReservationTTL,
		IdempotencyTTL:   cfg.IdempotencyTTL,
		SnapshotInterval: cfg.SnapshotInterval,
		PurchaseBatch:    cfg.PurchaseBatch,
		PurchaseInFlight: cfg.PurchaseInFlight,
		PurchaseLinger:   cfg.PurchaseLinger,
		PurchaseLimit:    limits.Policy(cfg.LimitPurchase),
	})
	a.Orders = orders.NewStore(a.rdb, keys)
	a.Orders.Hooks.StockReturned = a.Inventory.ForgetSoldOut
	a.Ranking = ranking.NewStore(a.rdb, keys, ranking.Options{
		Size: cfg.LeaderboardSize, PriorMean: cfg.RatingPriorMean, PriorWeight: cfg.RatingPriorWeight,
	})
	a.Orders.Hooks.PaidChanged = a.Ranking.PaidChanged
	if a.Payments, err = a.newPayments(ctx, cfg); err != nil {
		return nil, err
	}
	a.Orders.Hooks.Released = a.Payments.Released
	a.Payments.Observe = func(result string) { metrics.PaymentWebhooks.WithLabelValues(result).Inc() }
	opts := HTTPOptions(cfg)
	a.conns = connCaps(cfg)
	opts.Stream.Max = capStreams(opts.Stream.Max, a.conns)
	limiter, err := limits.NewLimiter(a.rdb, keys, httpapi.RatePolicies(opts.Limits))
	if err != nil {
		return nil, err
	}
	metrics.RefusalsFromMemory.From(limiter.FromMemory)
	metrics.RefusalsFromMemory.From(a.Inventory.RefusalsFromMemory)
	metrics.UnknownFromMemory.From(a.Inventory.UnknownFromMemory)
	a.expirer = orders.NewExpirer(a.Orders, cfg.ExpiryInterval, cfg.ExpiryBatch)
	metrics.ExpirerDrained.From(a.expirer.Drained)
	// The pool dials on first use: only the reconciliation report route needs Postgres (and
	// answers 503 while it is unreachable).
	if a.record, err = record.OpenQueries(cfg.PostgresDSN); err != nil {
		return nil, err
	}

	// Events: the relay publishes to KAFKA_BROKERS, or to an embedded Kafka-protocol broker
	// when that is unset. Kafka being down never stops selling: events wait in Redis (up to
	// FLASHSALE_OUTBOX_MAX).
	brokers := cfg.KafkaBrokers
	if a.kafkaLogin, err = cfg.KafkaSecurity(); err != nil {
		return nil, err
	}
	if len(brokers) == 0 {
		dir, derr := kafkaconn.EmbeddedDir(cfg.EmbeddedKafkaAddr)
		if derr != nil {
			return nil, derr
		}
		a.broker, err = kafkabroker.Start(kafkabroker.Options{
			Addr: cfg.EmbeddedKafkaAddr, Topic: cfg.KafkaTopic, Partitions: cfg.KafkaPartitions,
			DataDir: dir, // on disk, so events the reconciler has not read survive a restart
			Login:   a.kafkaLogin,
		})
		if err != nil { // most often the port is taken: a Kafka of the developer's own
			return nil, fmt.Errorf("embedded Kafka broker (FLASHSALE_EMBEDDED_KAFKA_ADDR=%s; or set KAFKA_BROKERS): %w", cfg.EmbeddedKafkaAddr, err)
		}
		brokers = []string{a.broker.Addr()}
		slog.Info("embedded Kafka-protocol broker", "addr", a.broker.Addr(), "topic", cfg.KafkaTopic, "dir", dir)
	}
	a.writer = outbox.NewWriter(brokers, cfg.KafkaTopic)
	if a.writer.Transport, err = a.kafkaTransport(); err != nil {
		return nil, err
	}
	relayOpt := outbox.Options{Max: int64(cfg.OutboxMax)}
	// Every order enters its user's order index from its event too, before the event leaves
	// Redis (an api that died between the purchase and its own index write loses no order),
	// and every order event grows its user's orders version (the ETag of "my orders").
	relayOpt.Events = orders.NewIndex(a.rdb, keys).Changed
	if crashpoint.Enabled("relay-after-publish") { // fault tests only
		relayOpt.AfterPublish = func(n int) error { crashpoint.Reached("relay-after-publish", n); return nil }
	}
	a.relay = outbox.New(a.rdb, keys, a.writer, relayOpt)
	if a.Queue, err = newQueue(a.rdb, keys, cfg, a.Inventory); err != nil {
		return nil, err
	}
	metrics.QueuePollsMemory.From(a.Queue.PollsFromMemory.Load)
	metrics.QueuePollsRedis.From(a.Queue.PollsFromRedis.Load)

	// The sale monitor: this instance's counts, plus gauges every instance reads alike.
	a.stats = stats.NewRecorder(a.rdb, keys)
	a.stats.CountFrom("expired", a.expirer.Drained)
	a.stats.AddGauge(a.stockGauge)
	a.stats.AddGauge(func(context.Context) (map[string]int64, bool) {
		total, _ := a.relay.Backlog()
		return map[string]int64{"outbox": total}, true
	})
	a.stats.CountFrom("redis_failovers", func() int64 { return int64(redisconn.Failovers()) })
	transport, err := a.kafkaTransport()
	if err != nil {
		return nil, err
	}
	a.lag = &lagGauge{topic: cfg.KafkaTopic,
		client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second, Transport: transport}}
	a.stats.AddGauge(a.lag.gauge)

	a.server = httpapi.New(httpapi.Deps{
		Options:        opts,
		Auth:           httpapi.NewAuth(cfg.JWTSecret, cfg.AdminToken, cfg.TokenTTL).WithPolicy(TokenPolicy(cfg)),
		Inventory:      a.Inventory,
		Orders:         a.Orders,
		Limiter:        limiter,
		Metrics:        metrics.Handler(),
		Ranking:        a.Ranking,
		Ready:          a.ready,
		DataLost:       a.marks.Lost,
		Web:            web.Files,
		Reconciliation: a.record.LatestReport,
		ReconcileRuns:  a.record.RecentRunsReport,
		SalesReport:    a.record.SalesReport,
		Disputes:       a.record.Disputes,
		Queue:          a.Queue,
		Stats:          a.stats,
		Redis:          a.rdb,
		Payments:       a.Payments,
	})
	return a, nil
}

// kafkaTransport is a Kafka transport of the api's own (the relay's writer and the monitor's
// lag queries each have one, so the lag stays measurable while the writer's connections are
// stuck), closed by Close: kafka-go's shared default would keep its connections, and their
// goroutines, after Close. It logs in as a.kafkaLogin says.
func (a *API) kafkaTransport() (*kafka.Transport, error) {
	t, err := a.kafkaLogin.Transport()
	if err != nil {
		return nil, err
	}
	a.transports = append(a.transports, t)
	return t, nil
}

// newQueue builds the waiting rooms, signing with FLASHSALE_QUEUE_SECRET (or, unset, a key
// derived from the JWT secret, so instances that share that secret share tickets and passes).
func newQueue(rdb redis.UniversalClient, keys keyspace.Space, cfg config.Config, inv *inventory.Store) (*queue.Store, error) {
	secrets := [][]byte{}
	for _, s := range cfg.QueueSecrets {
		secrets = append(secrets, []byte(s))
	}
	if len(secrets) == 0 {
		secrets = append(secrets, queue.DeriveKey([]byte(cfg.JWTSecret)))
	}
	signer, err := queue.NewSigner(secrets...)
	if err != nil {
		return nil, err
	}
	return queue.NewStore(rdb, keys, signer, inv, queue.Options{Tick: cfg.QueueTick, JoinBatch: cfg.PurchaseBatch}), nil
}

// TokenPolicy is what shopper tokens must satisfy, from the configuration.
func TokenPolicy(cfg config.Config) httpapi.TokenPolicy {
	return httpapi.TokenPolicy{Keys: cfg.JWTKeys, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, DevLogin: cfg.DevLogin}
}

// HTTPOptions are the HTTP layer's settings from the configuration.
func HTTPOptions(cfg config.Config) httpapi.Options {
	return httpapi.Options{
		DevLogin: cfg.DevLogin, TrustedProxies: cfg.TrustedProxies, SnapshotInterval: cfg.SnapshotInterval,
		PurchaseLimit: limits.Policy(cfg.LimitPurchase),
		Stream:        httpapi.StreamOptions{Heartbeat: cfg.StreamHeartbeat, PerClient: cfg.StreamPerClient, Max: cfg.StreamMax},
		StatsKeys:     keyspace.Space{Prefix: cfg.RedisPrefix},
		Limits: httpapi.RateLimits{Pay: limits.Policy(cfg.LimitPay), Cancel: limits.Policy(cfg.LimitCancel),
			Rating: limits.Policy(cfg.LimitRating), LoginUser: limits.Policy(cfg.LimitLoginUser),
			LoginIP: limits.Policy(cfg.LimitLoginIP), Reads: limits.Policy(cfg.LimitReads)},
		AccessLog: httpapi.AccessLog{Slow: cfg.AccessLogSlow, Sample: cfg.AccessLogSample},
		PublicURL: cfg.Payment.PublicURL,
	}
}

// startOps serves /healthz, /readyz and /metrics on FLASHSALE_OPS_ADDR, when set: a listener
// of their own, which no flood of the main one reaches.
func (a *API) startOps() (stop func(), err error) {
	if a.cfg.OpsAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", a.cfg.OpsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on FLASHSALE_OPS_ADDR=%s: %w", a.cfg.OpsAddr, err)
	}
	mux := http.NewServeMux()
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		mux.Handle("GET "+path, a.server)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
	capped := CapConns(ln, ConnCaps{Max: opsConns})
	metrics.HTTPConns.From(capped.Counts)
	go func() {
		if err := srv.Serve(capped); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("ops listener stopped", "addr", a.cfg.OpsAddr, "err", err)
		}
	}()
	slog.Info("ops listener (/healthz, /readyz, /metrics)", "url", "http://"+ln.Addr().String()+"/healthz")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// ready is /readyz: not shutting down (load balancers stop sending here first), Redis
// answers, the primary has the live replicas FLASHSALE_REDIS_ACK_REPLICAS requires, every
// script is loaded (reloaded after a Redis restart, a failover or SCRIPT FLUSH; the EVAL
// fallback covers the gap), and the outbox is under its bound.
func (a *API) ready(ctx context.Context) error {
	if a.stopping.Load() {
		return errShuttingDown
	}
	if err := a.marks.Lost(); err != nil { // the data-marker check (internal/datamark)
		return err
	}
	if err := redisconn.Ready(a.rdb); err != nil {
		return err
	}
	ok, err := exactlyonce.Loaded(ctx, a.rdb)
	if err != nil {
		return err
	}
	if !ok {
		if err := exactlyonce.Load(ctx, a.rdb); err != nil {
			return err
		}
	}
	return a.relay.Ready()
}

// errShuttingDown is /readyz's cause from the first moment of the shutdown.
var errShuttingDown = errors.New("shutting down")

// Handler is the api's HTTP handler (tests drive it without a listener).
func (a *API) Handler() http.Handler { return a.server }

// Server is the HTTP layer, for tests that add routes or list them.
func (a *API) Server() *httpapi.Server { return a.server }

// DataMarks is the api's watch on Redis's data markers (tests run its checks).
func (a *API) DataMarks() *datamark.Watch { return a.marks }

// Redis is the api's Redis client.
func (a *API) Redis() redis.UniversalClient { return a.rdb }

// Run serves cfg.HTTPAddr (or ln, when given: tests pass a listener on a free port) and runs
// the snapshot loop, the expirer, the relay and the admin listener until ctx ends; then it
// shuts down within cfg.ShutdownTimeout, in the steps its comment lists, and returns once
// every goroutine it started has returned.
func (a *API) Run(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", a.cfg.HTTPAddr); err != nil {
			return fmt.Errorf("listen on FLASHSALE_HTTP_ADDR=%s: %w", a.cfg.HTTPAddr, err)
		}
	}
	stopAdmin, err := metrics.StartAdmin(a.cfg.AdminAddr) // pprof and /metrics; off when empty
	if err != nil {
		ln.Close()
		return err
	}
	defer stopAdmin()
	stopOps, err := a.startOps()
	if err != nil {
		ln.Close()
		return err
	}
	defer stopOps()

	var wg sync.WaitGroup
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer func() { stopBG(); wg.Wait() }()
	wg.Add(8)
	go func() { defer wg.Done(); a.marks.Run(bg) }()
	go func() { defer wg.Done(); a.Payments.Run(bg) }()
	go func() { defer wg.Done(); a.Inventory.RunSnapshot(bg) }()
	go func() { defer wg.Done(); a.Queue.Run(bg) }()
	go func() { defer wg.Done(); a.expirer.Run(bg) }()
	go func() { defer wg.Done(); a.server.RunStreams(bg) }()
	go func() { defer wg.Done(); a.stats.Run(bg) }()
	go func() { defer wg.Done(); a.lag.run(bg) }()
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRelay()
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		if err := a.relay.Run(relayCtx); err != nil {
			slog.Error("outbox relay stopped", "err", err)
		}
	}()

	// Slow clients cannot hold a handler: the headers within 5 s, the whole request (a body
	// sent a byte at a time) within the read timeout, the answer within the write timeout;
	// idle keep-alive connections close.
	srv := &http.Server{Handler: a.server, ReadHeaderTimeout: min(5*time.Second, a.cfg.HTTPReadTimeout),
		ReadTimeout: a.cfg.HTTPReadTimeout, WriteTimeout: a.cfg.HTTPWriteTimeout, IdleTimeout: a.cfg.HTTPIdleTimeout}
	// Shutdown waits for handlers to return, and a catalogue stream's returns only when told.
	srv.RegisterOnShutdown(a.server.CloseStreams)
	// ... and for connections that never sent a request, unless they are closed (conns.go).
	conns := newUnusedConns()
	srv.ConnState = conns.track
	// The timeouts are enforced by a watch every tick (a tenth of the shortest, 5-100 ms)
	// instead of a timer re-armed five times per request (CoarseDeadlines).
	tick := min(srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout) / 10
	tick = max(5*time.Millisecond, min(tick, 100*time.Millisecond))
	// Over a connection cap a connection is closed at once (CapConns); the reserve
	// keeps /healthz, /readyz, /metrics and the admin routes reachable during a flood.
	capped := CapConns(CoarseDeadlines(ln, tick), a.conns)
	metrics.HTTPConns.From(capped.Counts)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(capped) }()
	slog.Info("api listening", "url", "http://"+ln.Addr().String()+"/")
	fmt.Fprintf(os.Stderr, "flashsale api: http://%s/  (admin page: http://%s/admin)\n", ln.Addr(), ln.Addr())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}

	// The shutdown, within cfg.ShutdownTimeout (the drain included): the drain, HTTP, the
	// background loops, then the relay.
	began := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	cause := context.Cause(ctx)
	if serveErr != nil {
		cause = serveErr
	}
	published := a.relay.Stats().Published
	slog.Info("shutting down", "cause", cause, "timeout", a.cfg.ShutdownTimeout.String(), "drain", a.cfg.ShutdownDrain.String())
	// /readyz answers 503 from now; during the drain the listener still takes what load
	// balancers send before they notice, and each keep-alive connection closes after its next
	// answer, so its client reconnects elsewhere.
	a.stopping.Store(true)
	if serveErr == nil && a.cfg.ShutdownDrain > 0 {
		srv.SetKeepAlivesEnabled(false)
		a.drain(sctx, a.cfg.ShutdownDrain)
	}
	drained := time.Since(began)
	streams, _ := a.server.StreamCounts()
	// The listener closes, streams are told to end, connections that never sent a request are
	// closed (conns.go) and requests in flight answer; out of time their connections are cut,
	// so no handler outlives Run.
	cut := false
	if err := conns.shutdown(sctx, srv, unusedConnAge); err != nil {
		cut = true
		slog.Warn("shutdown: requests still running at the timeout; closing their connections", "err", err)
		srv.Close()
	}
	httpDone := time.Since(began)
	stopBG() // every background loop: the expirer, waiting rooms, snapshot, monitor...
	wg.Wait()
	// The relay publishes the batches it holds; out of time it is aborted and they stay pending
	// in Redis for another relay after 30 s idle. Unread entries stay in the outbox for any relay.
	stopRelay()
	select {
	case <-relayDone:
	case <-sctx.Done():
		slog.Warn("shutdown: the outbox relay is still publishing at the timeout; its batch stays pending in Redis for another relay")
		a.relay.Abort()
		<-relayDone
	}
	slog.Info("shutdown complete", "took", time.Since(began).Round(time.Millisecond).String(),
		"drain", drained.Round(time.Millisecond).String(), "http", (httpDone - drained).Round(time.Millisecond).String(),
		"streams_ended", streams, "requests_cut", cut,
		"relay_published", a.relay.Stats().Published-published) // and "outbox relay stopped" says what it left
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// unusedConnAge: a connection silent this long when the shutdown waits for requests is a
// spare, closed rather than waited for (conns.go).
const unusedConnAge = 100 * time.Millisecond

// drain waits d (or until ctx ends); tests replace it to end the drain on their signal.
func (a *API) drain(ctx context.Context, d time.Duration) {
	if a.drainWait != nil {
		a.drainWait(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Close releases the api's connections and the embedded broker. Safe to call twice.
func (a *API) Close() {
	a.closeOnce.Do(func() {
		for i := len(a.closers) - 1; i >= 0; i-- {
			a.closers[i]()
		}
		if a.writer != nil {
			a.writer.Close()
		}
		for _, t := range a.transports {
			t.CloseIdleConnections()
		}
		if a.broker != nil {
			a.broker.Close()
		}
		if a.record != nil {
			a.record.Close()
		}
		if a.rdb != nil {
			a.rdb.Close()
		}
	})
}

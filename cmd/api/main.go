// Command api serves flashsale's HTTP contract: catalogue, purchases, orders, ratings,
// leaderboards, admin stock loading and the web pages.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/crashpoint"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/outbox"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/web"
)

func main() {
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	cfg, err := config.FromEnv()
	if err == nil {
		err = httpapi.CheckTrustedProxies(cfg.TrustedProxies)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config.Config) error {
	slog.Info("starting api", "config", fmt.Sprintf("%+v", cfg.Masked()))
	if cfg.JWTSecretGenerated {
		slog.Warn("FLASHSALE_JWT_SECRET is not set: using a random secret; tokens die with this process")
	}
	if cfg.AdminTokenGenerated {
		fmt.Fprintf(os.Stderr, "admin token (FLASHSALE_ADMIN_TOKEN not set): %s\n", cfg.AdminToken)
	}

	rdb, err := redisconn.Open(ctx, cfg.RedisAddrs, cfg.RedisDB)
	if err != nil {
		return err
	}
	defer rdb.Close()
	metrics.InstrumentRedis(rdb) // script calls and latency by script name
	if err := lua.Load(ctx, rdb); err != nil {
		return err
	}

	keys := keyspace.Space{Prefix: cfg.RedisPrefix}
	var relay *outbox.Relay // built below; purchases ask it whether the outbox has room
	inv := inventory.NewStore(rdb, keys, inventory.Options{
		Admit:            func() error { return relay.Admit() },
		ReservationTTL:   cfg.ReservationTTL,
		IdempotencyTTL:   cfg.IdempotencyTTL,
		SnapshotInterval: cfg.SnapshotInterval,
		PurchaseBatch:    cfg.PurchaseBatch,
		PurchaseLimit: inventory.PurchaseLimit{
			Rate: cfg.LimitPurchase.Rate, Period: cfg.LimitPurchase.Period, Burst: cfg.LimitPurchase.Burst,
		},
	})
	ord := orders.NewStore(rdb, keys)
	ord.Hooks.StockReturned = inv.ForgetSoldOut
	rank := ranking.NewStore(rdb, keys, ranking.Options{
		Size: cfg.LeaderboardSize, PriorMean: cfg.RatingPriorMean, PriorWeight: cfg.RatingPriorWeight,
	})
	ord.Hooks.PaidChanged = rank.PaidChanged
	limiter, err := limits.NewLimiter(rdb, keys, httpapi.RatePolicies(cfg))
	if err != nil {
		return err
	}
	expirer := orders.NewExpirer(ord, inv.IDs, cfg.ExpiryInterval, cfg.ExpiryBatch)
	metrics.ExpirerDrained.From(expirer.Drained)
	// The pool dials on first use: the api starts and sells without Postgres; only the
	// reconciliation report route needs it (and answers 503 while it is unreachable).
	record, err := reconcile.OpenPostgres(cfg.PostgresDSN)
	if err != nil {
		return err
	}
	defer record.Close()

	srv := httpapi.New(httpapi.Deps{
		Config:    cfg,
		Auth:      httpapi.NewAuth(cfg.JWTSecret, cfg.AdminToken, cfg.TokenTTL),
		Inventory: inv,
		Orders:    ord,
		Limiter:   limiter,
		Metrics:   metrics.Handler(),
		Ranking:   rank,
		Ready: func(ctx context.Context) error {
			ok, err := lua.Loaded(ctx, rdb)
			if err != nil {
				return err
			}
			if !ok {
				// Reload after a Redis restart or SCRIPT FLUSH; EVAL fallback covers the gap.
				if err := lua.Load(ctx, rdb); err != nil {
					return err
				}
			}
			return relay.Ready()
		},
		Web:            web.Files,
		Reconciliation: reconcile.LatestReport(record),
	})

	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()
	go inv.RunSnapshot(bg)
	go expirer.Run(bg)

	// Events: the outbox relay publishes to KAFKA_BROKERS, or to an embedded Kafka-protocol
	// broker when that is unset. Kafka being down never stops selling: events wait in Redis.
	kafkaAddrs := cfg.KafkaBrokers
	if len(kafkaAddrs) == 0 {
		broker, err := kafkabroker.Start(kafkabroker.Options{
			Addr: cfg.EmbeddedKafkaAddr, Topic: cfg.KafkaTopic, Partitions: cfg.KafkaPartitions,
			// On disk, so events the reconciler has not read yet survive an api restart.
			DataDir: filepath.Join(os.TempDir(), "flashsale-kafka-"+strings.ReplaceAll(cfg.EmbeddedKafkaAddr, ":", "_")),
		})
		if err != nil {
			return err
		}
		defer broker.Close()
		kafkaAddrs = []string{broker.Addr()}
		slog.Info("embedded Kafka-protocol broker", "addr", broker.Addr(), "topic", cfg.KafkaTopic)
	}
	kafkaWriter := outbox.NewWriter(kafkaAddrs, cfg.KafkaTopic)
	defer kafkaWriter.Close()
	relayOpt := outbox.Options{Max: int64(cfg.OutboxMax)}
	if crashpoint.Enabled("relay-after-publish") { // fault tests only
		relayOpt.AfterPublish = func(n int) error { crashpoint.Reached("relay-after-publish", n); return nil }
	}
	relay = outbox.New(rdb, keys, kafkaWriter, relayOpt)
	relayCtx, stopRelay := context.WithCancel(context.Background())
	defer stopRelay()
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		if err := relay.Run(relayCtx); err != nil {
			slog.Error("outbox relay stopped", "err", err)
		}
	}()

	// pprof (and /metrics) for operators on FLASHSALE_ADMIN_ADDR; off when empty.
	stopAdmin, err := metrics.StartAdmin(cfg.AdminAddr)
	if err != nil {
		return err
	}
	defer stopAdmin()

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	httpSrv := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	slog.Info("api listening", "url", "http://"+ln.Addr().String()+"/")
	fmt.Fprintf(os.Stderr, "flashsale api: http://%s/  (admin page: http://%s/admin)\n", ln.Addr(), ln.Addr())

	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	slog.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(sctx); err != nil {
		slog.Warn("http shutdown", "err", err)
	}
	// After the last request: the relay publishes what it holds, then the broker closes.
	stopRelay()
	<-relayDone
	cancelBG()
	return nil
}

package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/crashpoint"
	"github.com/flashsale/flashsale/internal/datamark"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/kafkaconn"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/record"
)

// OpenReconciler waits for Postgres and builds the Reconciler the batch and restore commands
// run; the func it returns releases their connections.
func OpenReconciler(ctx context.Context, cfg config.Config) (*reconcile.Reconciler, func(), error) {
	if err := AwaitPostgres(ctx, cfg); err != nil {
		return nil, nil, err
	}
	return newReconciler(ctx, cfg)
}

// newReconciler builds the reconciler from the configuration: Redis, a lazy Postgres pool, the Kafka
// pipeline (embedded broker address when KAFKA_BROKERS is unset), the ranking store.
func newReconciler(ctx context.Context, cfg config.Config) (*reconcile.Reconciler, func(), error) {
	rdb, err := awaitRedis(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	login, err := cfg.KafkaSecurity()
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	transport, err := login.Transport()
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	db, err := record.OpenQueries(cfg.PostgresDSN)
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	keys := keyspace.Space{Prefix: cfg.RedisPrefix}
	markers := datamark.NewKeeper(rdb, keys, db)
	metrics.RedisDataLost.From(func() bool { return markers.Lost() != nil })
	var payments reconcile.PaymentProvider
	var money reconcile.MoneyProvider
	switch p := cfg.Payment; {
	case p.Provider == "sim" && p.SimKeyGenerated:
		// The simulator shows a key's payments to that key only: without the api's, there is
		// nothing to compare with.
		slog.Warn("FLASHSALE_PAYMENT_SIM_API_KEY is not set: payments are not reconciled against the simulator")
	case p.Provider != "none":
		st := payment.ProviderFor(p.Provider, p.SimAddr, p.SimAPIKey, p.StripeAPIBase, p.StripeSecretKey, p.WebhookSecrets)
		payments, money = st, moneyProvider{st}
	}
	r := reconcile.New(rdb, keys, db, reconcile.Options{
		Payments:       payments,
		Money:          money,
		ReservationTTL: cfg.ReservationTTL,
		Retention:      cfg.OrderRetention,
		IdempotencyTTL: cfg.IdempotencyTTL,
		Markers:        markers,
		Pipeline:       reconcile.NewKafkaPipeline(cfg.Brokers(), cfg.KafkaTopic, kafkaconn.ConsumerGroup, transport),
		Ranking: ranking.NewStore(rdb, keys, ranking.Options{
			Size: cfg.LeaderboardSize, PriorMean: cfg.RatingPriorMean, PriorWeight: cfg.RatingPriorWeight,
		}),
	})
	return r, func() { db.Close(); rdb.Close() }, nil
}

// moneyProvider adapts the payment provider to what the money check asks of it.
type moneyProvider struct{ *payment.Stripe }

func (m moneyProvider) ListPayments(ctx context.Context, since time.Time, fn func(reconcile.ProviderPayment) error) error {
	return m.Stripe.ListPayments(ctx, since, func(p payment.ProviderPayment) error {
		return fn(reconcile.ProviderPayment{ID: p.ID, Status: p.Status, AmountCents: p.AmountCents, Currency: p.Currency,
			RefundedCents: p.RefundedCents, OrderID: p.OrderID, Attempt: p.Attempt, Created: p.Created})
	})
}

// OpenRecord waits for Postgres, opens it and applies the migrations: all of `reconciler
// migrate` and the first step of `reconciler run`. closeDB releases the pool.
func OpenRecord(ctx context.Context, cfg config.Config) (db *gorm.DB, closeDB func(), err error) {
	if err := AwaitPostgres(ctx, cfg); err != nil { // it may still be starting
		return nil, nil, err
	}
	if db, err = record.Open(cfg.PostgresDSN); err != nil {
		return nil, nil, err
	}
	closeDB = func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	}
	v, err := record.Migrate(ctx, db)
	if err != nil {
		closeDB()
		return nil, nil, err
	}
	slog.Info("migrations applied", "version", v)
	return db, closeDB, nil
}

// RunReconciler is `reconciler run`: it applies the migrations, serves the admin listener,
// starts the scheduled jobs and consumes the event topic into Postgres until ctx ends, then
// drains the batch in hand and commits it.
func RunReconciler(ctx context.Context, cfg config.Config) error {
	db, closeDB, err := OpenRecord(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeDB()

	metrics.RegisterReconciler()
	metrics.OrdersPruned.From(reconcile.PrunedTotal)
	stopAdmin, err := metrics.StartAdmin(cfg.AdminAddr) // /metrics and pprof; off when empty
	if err != nil {
		return err
	}
	defer stopAdmin()

	stopSchedule, err := startSchedule(ctx, cfg)
	if err != nil {
		return err
	}
	// Deferred after the consumer's Run: a batch run in progress is cancelled (and recorded
	// as failed) while the consumer drains its last batch.
	defer stopSchedule()

	// The embedded broker's login is the deployment's (the api's), read from beside its log.
	login, err := cfg.KafkaSecurity()
	if err != nil {
		return err
	}
	dialer, err := login.Dialer()
	if err != nil {
		return err
	}
	transport, err := login.Transport()
	if err != nil {
		return err
	}
	opt := record.ConsumerOptions{
		Dialer:          dialer,
		Transport:       transport,
		Brokers:         cfg.Brokers(),
		Topic:           cfg.KafkaTopic,
		GroupID:         kafkaconn.ConsumerGroup,
		DrainTimeout:    cfg.ShutdownTimeout,
		PaymentProvider: cfg.Payment.Provider,
	}
	if crashpoint.Enabled("consumer-after-commit") { // fault tests only
		opt.AfterCommit = func(r record.Result) error {
			crashpoint.Reached("consumer-after-commit", r.Applied+r.Duplicates+r.Invalid)
			return nil
		}
	}
	return record.NewConsumer(db, opt).Run(ctx)
}

// startSchedule starts the pruning passes (every reconcile.PruneInterval of
// cfg.OrderRetention) and batch reconciliation every cfg.ReconcileInterval (none when 0)
// beside the consumer; stop ends them and waits for them. Every instance may run them: the
// shared lock lets one job run at a time.
func startSchedule(ctx context.Context, cfg config.Config) (stop func(), err error) {
	r, closeAll, err := newReconciler(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("scheduled jobs: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.PruneEvery(ctx, reconcile.PruneInterval(cfg.OrderRetention)) })
	wg.Go(func() { r.Markers().Run(ctx) }) // notices a Redis that lost its data
	slog.Info("order pruning on", "retention", cfg.OrderRetention.String(),
		"every", reconcile.PruneInterval(cfg.OrderRetention).String())
	if cfg.ReconcileInterval > 0 {
		wg.Go(func() { r.RunEvery(ctx, cfg.ReconcileInterval) })
		slog.Info("scheduled reconciliation on", "every", cfg.ReconcileInterval)
	}
	return func() {
		cancel()
		wg.Wait()
		closeAll()
	}, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/datamark"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/kafkaconn"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/redisconn"
)

// errDrift is returned by batchCommand when the run found drift or could not verify
// everything (the report was printed and stored); commands exit non-zero on it.
var errDrift = errors.New("reconcile: drift found")

// openReconciler builds a Reconciler from the configuration: Redis, a lazy Postgres pool, the Kafka
// pipeline (embedded broker address when KAFKA_BROKERS is unset), the ranking store.
func openReconciler(ctx context.Context, cfg config.Config) (*reconcile.Reconciler, func(), error) {
	rdb, err := redisconn.OpenWaiting(ctx, cfg.RedisStartWait, func(ctx context.Context) (redis.UniversalClient, error) {
		return redisconn.OpenWith(ctx, cfg.RedisOptions())
	})
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
			RefundedCents: p.RefundedCents, OrderID: p.OrderID, Created: p.Created})
	})
}

// batchCommand is `reconciler batch [--repair] [--json|--table]`: one batch run, its report
// printed as a table on a terminal and as JSON otherwise.
func batchCommand(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // one error line; --help prints the usage
	repair := fs.Bool("repair", false, "re-emit the events of orders and items Postgres is missing or behind on")
	asJSON := fs.Bool("json", false, "print the report as JSON (default when stdout is not a terminal)")
	asTable := fs.Bool("table", false, "print the report as a table (default on a terminal)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: batch: unexpected arguments %q", errReportUsage, fs.Args())
	}
	if err := app.AwaitPostgres(ctx, cfg); err != nil {
		return err
	}
	r, closeAll, err := openReconciler(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeAll()
	rep, err := r.Batch(ctx, reconcile.BatchOptions{Repair: *repair})
	if rep != nil {
		table := *asTable || (!*asJSON && isTerminal(stdout))
		if table {
			rep.WriteTable(stdout)
		} else {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		}
	}
	if err != nil {
		return err
	}
	if rep.DriftRemains() { // a repair that fixed everything it found exits 0
		return errDrift
	}
	return nil
}

// restoreCommand is `reconciler restore (--item ID[,ID...] | --all) [--force]`.
func restoreCommand(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // one error line; --help prints the usage
	items := fs.String("item", "", "comma-separated item ids to rebuild")
	all := fs.Bool("all", false, "rebuild every item of the record")
	force := fs.Bool("force", false, "rebuild even items Redis shows being sold")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if (*items == "") == !*all || fs.NArg() > 0 {
		return fmt.Errorf("%w: restore: give exactly one of --item ID[,ID...] or --all", errReportUsage)
	}
	opt := reconcile.RestoreOptions{All: *all, Force: *force}
	if *items != "" {
		opt.Items = strings.Split(*items, ",")
	}
	if err := app.AwaitPostgres(ctx, cfg); err != nil {
		return err
	}
	r, closeAll, err := openReconciler(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeAll()
	res, err := r.Restore(ctx, opt)
	if res != nil {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	}
	if err != nil {
		return err
	}
	if len(res.Refused) > 0 {
		return fmt.Errorf("restore: %d items refused", len(res.Refused))
	}
	return nil
}

// flagError makes a flag parsing error a usage mistake (help asked stays flag.ErrHelp).
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError(err)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

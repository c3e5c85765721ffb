package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestRunSchedulesReconciliation: `reconciler run` with FLASHSALE_RECONCILE_INTERVAL set runs
// batch reconciliations beside the consumer (real Redis, Postgres and a kfake broker), and
// stops both when its context ends. What a run checks, and that runs of several instances
// never overlap, is internal/reconcile's TestSchedule.
func TestRunSchedulesReconciliation(t *testing.T) {
	cfg := testConfig(t, nil)
	cfg.ReconcileInterval = 50 * time.Millisecond

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()

	conn, err := pgx.Connect(context.Background(), cfg.PostgresDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	waitWhileRunning(t, done, "two scheduled runs finished clean", func() bool {
		var ok int
		// The table exists from the start: testenv.Postgres applied the migrations.
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_runs WHERE status = 'ok'`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok >= 2
	})
	stopRun(t, cancel, done)
}

// `--help` on every command exits 0 and starts nothing: the configuration points at servers
// that do not exist, so anything that connected would fail or hang instead.
func TestHelpStartsNothing(t *testing.T) {
	nowhere := map[string]string{
		"FLASHSALE_POSTGRES_DSN": "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		"FLASHSALE_REDIS_ADDRS":  "127.0.0.1:1",
		"KAFKA_BROKERS":          "127.0.0.1:1",
	}
	getenv := func(k string) string { return nowhere[k] }
	for _, argv := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"migrate", "--help"},
		{"batch", "--help"}, {"restore", "--help"}, {"batch", "-h"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if code := cli(ctx, argv, getenv); code != 0 {
			t.Errorf("reconciler %v: exit %d, want 0", argv, code)
		}
		cancel()
	}
	if code := cli(context.Background(), []string{"nonsense"}, getenv); code != 2 {
		t.Errorf("an unknown command: exit %d, want 2", code)
	}
}

// `reconciler run` prunes by itself, every reconcile.PruneInterval of the retention, with no
// batch schedule set: an order the record holds final for longer than the retention and that
// Redis no longer has is recorded as pruned. What a pass checks is internal/reconcile's
// TestPrune*.
func TestRunPrunes(t *testing.T) {
	cfg := testConfig(t, map[string]string{"FLASHSALE_RESERVATION_TTL": "100ms",
		"FLASHSALE_IDEMPOTENCY_TTL": "200ms", "FLASHSALE_ORDER_RETENTION": "200ms"})

	conn, err := pgx.Connect(context.Background(), cfg.PostgresDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO orders (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at)
		VALUES ('a.1', 'a', 'u', 1, 100, 'paid', now() - interval '1 hour', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	waitWhileRunning(t, done, "a pruning pass recorded the order", func() bool {
		var pruned bool
		if err := conn.QueryRow(context.Background(), `SELECT pruned_at IS NOT NULL FROM orders WHERE id = 'a.1'`).Scan(&pruned); err != nil {
			t.Fatal(err)
		}
		return pruned
	})
	stopRun(t, cancel, done)
}

// waitWhileRunning waits up to 30 s for cond, failing the test if the run (done) returns first.
func waitWhileRunning(t *testing.T, done <-chan error, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, what, 30*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		default:
		}
		return cond()
	})
}

// stopRun ends a run's context and waits for it to return without an error.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop within 30 s of its context ending")
	}
}

// testConfig is the configuration env parses to, on the test's own Redis key prefix, a
// throw-away Postgres database and a kfake broker.
func testConfig(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Parse(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	_, keys := testenv.Redis(t)
	cfg.RedisAddrs = []string{testenv.RedisAddr()}
	cfg.RedisPrefix = keys.Prefix
	cfg.PostgresDSN = testenv.Postgres(t)
	cfg.KafkaBrokers = []string{testenv.Kafka(t, cfg.KafkaTopic, 1).Addr()}
	return cfg
}

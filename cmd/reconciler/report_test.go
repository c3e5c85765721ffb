package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// `reconciler report` prints the record's post-sale report as JSON or CSV, filtered like the
// api's route; argument mistakes exit 2 before any connection.
func TestReportCommand(t *testing.T) {
	cfg, err := config.Parse(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.PostgresDSN = testenv.Postgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cfg.PostgresDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	start := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	for _, stmt := range []string{
		`INSERT INTO items (id, name, stock_total, starts_at, ends_at) VALUES
		('a', 'A', 2, $1::timestamptz, $1::timestamptz + interval '1 hour'), ('b', 'B', 1, $1::timestamptz + interval '1 day', $1::timestamptz + interval '25 hours')`,
		`INSERT INTO orders (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at) VALUES
		('a.1', 'a', 'u', 2, 300, 'paid', $1::timestamptz + interval '2 seconds', $1::timestamptz + interval '3 seconds')`,
		`INSERT INTO stock_movements (event_id, item_id, kind, delta, order_id, at) VALUES
		('a/1-0', 'a', 'reserved', -2, 'a.1', $1::timestamptz + interval '2 seconds')`,
	} {
		if _, err := conn.Exec(ctx, stmt, start); err != nil {
			t.Fatal(err)
		}
	}

	var out bytes.Buffer
	if err := reportCommand(ctx, cfg, []string{"--to", "2026-11-20T12:00:00Z"}, &out); err != nil {
		t.Fatal(err)
	}
	var rep record.SalesReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rep.Items) != 1 || rep.Items[0].ItemID != "a" || rep.Items[0].RevenueCents != 600 ||
		rep.Items[0].SellOutSeconds == nil || *rep.Items[0].SellOutSeconds != 2 {
		t.Fatalf("report --to: %s", out.String())
	}

	out.Reset()
	if err := reportCommand(ctx, cfg, []string{"--csv", "--item", "b"}, &out); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil || len(rows) != 2 || rows[1][0] != "b" {
		t.Fatalf("report --csv --item b: %v %q", err, rows)
	}

	nowhere := map[string]string{"FLASHSALE_POSTGRES_DSN": "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"}
	for _, argv := range [][]string{{"report", "--from", "yesterday"}, {"report", "--item", "a b"},
		{"report", "--bogus"}, {"report", "extra"}} {
		if code := cli(ctx, argv, func(k string) string { return nowhere[k] }); code != 2 {
			t.Errorf("reconciler %v: exit %d, want 2", argv, code)
		}
	}
	if code := cli(ctx, []string{"report", "--help"}, func(k string) string { return nowhere[k] }); code != 0 {
		t.Errorf("reconciler report --help: exit %d, want 0", code)
	}
}

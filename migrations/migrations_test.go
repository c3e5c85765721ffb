package migrations_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"regexp"
	"testing"

	"github.com/flashsale/flashsale/internal/testing/testenv"
	"github.com/flashsale/flashsale/migrations"
)

// TestUpDownUp applies every migration, rolls all of them back and applies them again: each
// down undoes its up completely.
func TestUpDownUp(t *testing.T) {
	db, err := sql.Open("pgx", testenv.EmptyPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	v, err := migrations.Up(ctx, db)
	if err != nil || v < 7 {
		t.Fatalf("up: version %d, %v", v, err)
	}
	for _, table := range []string{"items", "orders", "stock_movements", "ratings", "processed_events", "reconciliation_runs", "dead_letters"} {
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Err(); err != nil {
			t.Fatalf("table %s: %v", table, err)
		}
	}
	if err := migrations.DownTo(ctx, db, 0); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after down: %d tables left (%v)", n, err)
	}
	if v2, err := migrations.Up(ctx, db); err != nil || v2 != v {
		t.Fatalf("up again: %d %v", v2, err)
	}
}

// TestNumbering: every file is NNNNN_name.sql with a unique number (parallel branches adding
// migrations must not collide).
func TestNumbering(t *testing.T) {
	names, err := fs.Glob(os.DirFS("."), "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations: %v", err)
	}
	re := regexp.MustCompile(`^(\d{5})_[a-z0-9_]+\.sql$`)
	seen := map[string]string{}
	for _, n := range names {
		m := re.FindStringSubmatch(n)
		if m == nil {
			t.Errorf("%s: want NNNNN_name.sql", n)
			continue
		}
		if prev, ok := seen[m[1]]; ok {
			t.Errorf("%s and %s share number %s", prev, n, m[1])
		}
		seen[m[1]] = n
	}
}

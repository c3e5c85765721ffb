package testenv

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for the migrations

	"github.com/flashsale/flashsale/migrations"
)

// PostgresAdminDSN is the shared test server's maintenance database
// (FLASHSALE_TEST_POSTGRES overrides).
func PostgresAdminDSN() string {
	if d := os.Getenv("FLASHSALE_TEST_POSTGRES"); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// Postgres creates a throw-away database with a random name on the shared test server,
// applies every migration and returns its DSN; the database is dropped when the test ends.
func Postgres(t testing.TB) string {
	t.Helper()
	dsn := EmptyPostgres(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dsn
}

// EmptyPostgres is Postgres without the migrations (for tests of the migrations themselves).
func EmptyPostgres(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := PostgresAdminDSN()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("testenv: PostgreSQL at %s: %v\n(start it with `make services`, or set FLASHSALE_TEST_POSTGRES)", admin, err)
	}
	defer conn.Close(ctx)
	name := "t_" + Token(8)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("testenv: drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("testenv: FLASHSALE_TEST_POSTGRES must be a postgres:// URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

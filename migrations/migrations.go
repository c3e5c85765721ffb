// Package migrations holds the PostgreSQL schema of the reconciler's record as numbered goose
// SQL files (up and down), embedded in the binaries. `reconciler migrate` and the reconciler's
// start-up apply them; a Postgres advisory lock lets several processes start at once.
//
// The numbers jump from 00007 to 00020: job_fences was numbered 20 while another branch held
// numbers 8-19 in reserve, and that branch never landed. Applied migrations keep their numbers
// (goose records them), so the gap stays; new ones continue from the highest (00021...).
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Provider returns a goose provider over db for the embedded migrations.
func Provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration and returns the schema version reached.
func Up(ctx context.Context, db *sql.DB) (int64, error) {
	p, err := Provider(db)
	if err != nil {
		return 0, err
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("migrations: up: %w", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: version: %w", err)
	}
	return v, nil
}

// DownTo rolls back to version (0 = empty schema).
func DownTo(ctx context.Context, db *sql.DB, version int64) error {
	p, err := Provider(db)
	if err != nil {
		return err
	}
	if _, err := p.DownTo(ctx, version); err != nil {
		return fmt.Errorf("migrations: down to %d: %w", version, err)
	}
	return nil
}

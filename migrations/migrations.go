// Package migrations holds the PostgreSQL schema of the reconciler's record as numbered goose SQL
// files (up and down), embedded in the binaries and applied by `reconciler migrate` and its
// start-up under an advisory lock. Numbers 00008-00019 were never used; applied migrations keep
// theirs (goose records them), so new ones continue from the highest.
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

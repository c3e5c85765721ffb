package record

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/flashsale/flashsale/migrations"
)

// Open connects gorm to the PostgreSQL at dsn (pgx underneath).
func Open(dsn string) (*gorm.DB, error) {
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{
		// Batches are large: log errors without their parameters, and no slow-query lines.
		// Into the process's JSON log (slog), not plain text beside it.
		Logger: logger.NewSlogLogger(slog.Default().With("component", "gorm"), logger.Config{
			LogLevel: logger.Error, ParameterizedQueries: true, IgnoreRecordNotFoundError: true,
		}),
		// Writer opens its own transaction per batch; single statements need none.
		SkipDefaultTransaction: true,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("record: open postgres: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("record: open postgres: %w", err)
	}
	sqlDB.SetMaxOpenConns(8)
	sqlDB.SetMaxIdleConns(4)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// Ping opens one connection to dsn and closes it: whether Postgres takes connections now.
func Ping(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("record: postgres: %w", err)
	}
	return conn.Close(ctx)
}

// Migrate applies the embedded migrations and returns the schema version.
func Migrate(ctx context.Context, db *gorm.DB) (int64, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return 0, err
	}
	return migrations.Up(ctx, sqlDB)
}

// Command api serves flashsale's HTTP contract: catalogue, purchases, orders, ratings,
// leaderboards, admin stock loading and the web pages. The wiring is internal/app.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/shutdown"
)

func main() {
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	cfg, err := config.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel})))
	ctx, stop := shutdown.OnSignal(context.Background()) // a second signal exits at once
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		if errors.Is(err, config.ErrInvalid) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config.Config) error {
	slog.Info("starting api", "config", cfg) // Config.LogValue: structured, secrets masked
	if cfg.JWTSecretGenerated {
		slog.Warn("FLASHSALE_JWT_SECRET is not set: using a random secret; tokens die with this process")
	}
	if cfg.AdminTokenGenerated {
		fmt.Fprintf(os.Stderr, "admin token (FLASHSALE_ADMIN_TOKEN not set): %s\n", cfg.AdminToken)
	}
	api, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer api.Close()
	return api.Run(ctx, nil)
}

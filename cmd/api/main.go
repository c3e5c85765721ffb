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
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/shutdown"
)

const usage = `usage: api

Serves flashsale's HTTP contract (the shop, the admin pages, /api, /metrics) on
FLASHSALE_HTTP_ADDR (default 127.0.0.1:8080). It takes no arguments: every setting is an
environment variable (FLASHSALE_*, KAFKA_*), listed with its default in README.md
"Configuration". Exit codes: 0 stopped by SIGTERM/SIGINT, 1 a dependency unreachable within
its start timeout or an address taken, 2 an invalid setting or a usage mistake.
`

func main() {
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	for _, a := range os.Args[1:] {
		if a == "-h" || a == "-help" || a == "--help" || a == "help" {
			fmt.Print(usage)
			os.Exit(0)
		}
	}
	if len(os.Args) > 1 {
		fmt.Fprintf(os.Stderr, "api: unexpected arguments %q (settings are environment variables; see api --help)\n", os.Args[1:])
		os.Exit(2)
	}
	for _, w := range config.UnknownVariables(os.Environ()) {
		slog.Warn(w)
	}
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
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, redisconn.ErrInvalidSetting) {
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

// Command reconciler keeps the PostgreSQL record of the sale: it consumes the event topic in a
// consumer group and writes every event exactly once (by event_id). Its other commands
// (migrate, batch, restore, report) are in usage below; `reconciler --help` prints it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/shutdown"
)

const usage = `usage: reconciler [command]

  run (default)   consume events into PostgreSQL, prune final orders from Redis, keep Redis's
                  data markers, and run batch reconciliation every FLASHSALE_RECONCILE_INTERVAL
  migrate         apply the migrations and exit
  batch [--repair] [--json|--table]
                  one reconciliation run of Redis against PostgreSQL (exit 3 on drift)
  restore (--item ID[,ID...] | --all) [--force]
                  rebuild Redis from PostgreSQL after it lost its data
  report [--from T] [--to T] [--item ID] [--csv]
                  the post-sale report from PostgreSQL

Settings are environment variables (FLASHSALE_*, KAFKA_*; README.md "Configuration").
Exit codes: 0 done, 1 failed, 2 a usage mistake or an invalid setting, 3 drift found.`

func main() {
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	ctx, stop := shutdown.OnSignal(context.Background()) // a second signal exits at once
	code := cli(ctx, os.Args[1:], os.Getenv)
	stop()
	os.Exit(code)
}

// cli runs one command and returns the process's exit code: 0 done (or help printed), 1
// failed, 2 bad usage or configuration (a Postgres refusing the login or missing the database
// included), 3 drift found (batch).
func cli(ctx context.Context, argv []string, getenv func(string) string) int {
	cmd, args := "run", []string(nil)
	if len(argv) > 0 {
		cmd, args = argv[0], argv[1:]
	}
	// `--help`, alone or after a command, prints the usage and exits 0, starting nothing.
	if cmd == "-h" || cmd == "-help" || cmd == "--help" || cmd == "help" || wantsHelp(args) {
		fmt.Println(usage)
		return 0
	}
	for _, w := range config.UnknownVariables(os.Environ()) {
		slog.Warn(w)
	}
	cfg, err := config.Parse(getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reconciler:", err)
		return 2
	}
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel})))
	switch cmd {
	case "run":
		err = run(ctx, cfg)
	case "migrate":
		err = migrate(ctx, cfg)
	case "batch":
		err = batchCommand(ctx, cfg, args, os.Stdout)
	case "restore":
		err = restoreCommand(ctx, cfg, args, os.Stdout)
	case "report":
		err = reportCommand(ctx, cfg, args, os.Stdout)
	default:
		fmt.Fprintf(os.Stderr, "reconciler: unknown command %q (see reconciler --help)\n", cmd)
		return 2
	}
	var bad *app.BadSetting
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0 // the command printed its usage
	case errors.As(err, &bad), errors.Is(err, errReportUsage):
		fmt.Fprintln(os.Stderr, "reconciler:", err)
		return 2
	case errors.Is(err, errDrift):
		fmt.Fprintln(os.Stderr, "reconciler:", err)
		return 3
	case errors.Is(err, redisconn.ErrInvalidSetting):
		fmt.Fprintln(os.Stderr, "reconciler:", err)
		return 2
	case err != nil:
		fmt.Fprintln(os.Stderr, "reconciler:", err)
		return 1
	}
	return 0
}

func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

func migrate(ctx context.Context, cfg config.Config) error {
	_, closeDB, err := app.OpenRecord(ctx, cfg)
	if err != nil {
		return err
	}
	closeDB()
	return nil
}

// run consumes until SIGINT/SIGTERM, then drains the batch in hand and commits it. With
// cfg.ReconcileInterval set it also runs scheduled batch reconciliation until then.
func run(ctx context.Context, cfg config.Config) error {
	slog.Info("starting reconciler", "config", cfg) // Config.LogValue: structured, secrets masked
	return app.RunReconciler(ctx, cfg)
}

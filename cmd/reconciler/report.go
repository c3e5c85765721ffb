package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/record"
)

// errReportUsage marks a mistake in report's arguments: exit 2.
var errReportUsage = errors.New("usage")

func usageError(err error) error { return fmt.Errorf("%w: %w", errReportUsage, err) }

// reportCommand is `reconciler report [--from T] [--to T] [--item ID] [--csv]`: the post-sale
// report from the Postgres record, as JSON (the api's GET /api/admin/reports/sales) or CSV.
func reportCommand(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	from := fs.String("from", "", "only items whose sale window ends at or after this RFC 3339 time")
	to := fs.String("to", "", "only items whose sale window starts at or before this RFC 3339 time")
	item := fs.String("item", "", "only this item")
	asCSV := fs.Bool("csv", false, "print CSV, one row per item (default: JSON)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError(fmt.Errorf("report: %w", err))
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("report: unexpected arguments %q", fs.Args()))
	}
	var f record.SalesFilter
	for _, t := range []struct {
		name, v string
		dst     **time.Time
	}{{"from", *from, &f.From}, {"to", *to, &f.To}} {
		if t.v == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			return usageError(fmt.Errorf("report: --%s must be an RFC 3339 time such as 2026-11-27T10:00:00Z", t.name))
		}
		*t.dst = &v
	}
	if *item != "" && !keyspace.ValidID(*item) {
		return usageError(fmt.Errorf("report: --item must be an item id (1-64 of A-Z a-z 0-9 _ -)"))
	}
	f.Item = *item
	if err := app.AwaitPostgres(ctx, cfg); err != nil {
		return err
	}
	q, err := record.OpenQueries(cfg.PostgresDSN)
	if err != nil {
		return err
	}
	defer q.Close()
	rep, err := q.SalesReport(ctx, f)
	if err != nil {
		return err
	}
	if *asCSV {
		return rep.WriteCSV(stdout)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/reconcile"
)

// errDrift is returned by batchCommand when the run found drift or could not verify
// everything (the report was printed and stored); commands exit non-zero on it.
var errDrift = errors.New("reconcile: drift found")

// batchCommand is `reconciler batch [--repair] [--json|--table]`: one batch run, its report
// printed as a table on a terminal and as JSON otherwise.
func batchCommand(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // one error line; --help prints the usage
	repair := fs.Bool("repair", false, "re-emit the events of orders and items Postgres is missing or behind on")
	asJSON := fs.Bool("json", false, "print the report as JSON (default when stdout is not a terminal)")
	asTable := fs.Bool("table", false, "print the report as a table (default on a terminal)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: batch: unexpected arguments %q", errReportUsage, fs.Args())
	}
	r, closeAll, err := app.OpenReconciler(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeAll()
	rep, err := r.Batch(ctx, reconcile.BatchOptions{Repair: *repair})
	if rep != nil {
		table := *asTable || (!*asJSON && isTerminal(stdout))
		if table {
			rep.WriteTable(stdout)
		} else {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		}
	}
	if err != nil {
		return err
	}
	if rep.DriftRemains() { // a repair that fixed everything it found exits 0
		return errDrift
	}
	return nil
}

// restoreCommand is `reconciler restore (--item ID[,ID...] | --all) [--force]`.
func restoreCommand(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // one error line; --help prints the usage
	items := fs.String("item", "", "comma-separated item ids to rebuild")
	all := fs.Bool("all", false, "rebuild every item of the record")
	force := fs.Bool("force", false, "rebuild even items Redis shows being sold")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if (*items == "") == !*all || fs.NArg() > 0 {
		return fmt.Errorf("%w: restore: give exactly one of --item ID[,ID...] or --all", errReportUsage)
	}
	opt := reconcile.RestoreOptions{All: *all, Force: *force}
	if *items != "" {
		opt.Items = strings.Split(*items, ",")
	}
	r, closeAll, err := app.OpenReconciler(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeAll()
	res, err := r.Restore(ctx, opt)
	if res != nil {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	}
	if err != nil {
		return err
	}
	if len(res.Refused) > 0 {
		return fmt.Errorf("restore: %d items refused", len(res.Refused))
	}
	return nil
}

// flagError makes a flag parsing error a usage mistake (help asked stays flag.ErrHelp).
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError(err)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Command bench measures flashsale against naive ceilings on this machine in one run
// (`go run ./cmd/bench`; `-short` runs every row tiny) and prints a table of rates, latencies
// and ratios. Each row runs the api and its baselines as child processes, in turns
// (interleave.go); docs/performance.md, "What each row measures", defines every row.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if mode := os.Getenv(serveEnv); mode != "" {
		if err := serveBaseline(mode); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	var opt options
	flag.BoolVar(&opt.short, "short", false, "run every row tiny (CI smoke: rows, not numbers)")
	flag.DurationVar(&opt.dur, "duration", 8*time.Second, "measured time per row")
	flag.IntVar(&opt.rounds, "rounds", interleaveRounds, "turns the api and its baselines take in each row (the row's time is split between them)")
	flag.IntVar(&opt.conns, "conns", 64, "keep-alive connections of the load generator")
	flag.IntVar(&opt.users, "users", 20000, "distinct shoppers (tokens) buying")
	flag.IntVar(&opt.rows, "rows", 200000, "rows for the reconciler and CopyFrom rows")
	flag.StringVar(&opt.profileDir, "profile", "", "write CPU profiles of the api during its rows to this directory")
	flag.BoolVar(&opt.verbose, "v", false, "show the servers' logs")
	flag.BoolVar(&opt.sharedRedis, "shared-redis", false, "run against FLASHSALE_REDIS_ADDRS (default 127.0.0.1:6379) instead of a private redis-server (Redis CPU per purchase is then not measured)")
	flag.StringVar(&opt.only, "only", "", "comma-separated steps to run (hello,evalsha,minimal,api,reads,soldout,purchase,replicas,reconciler,latency,queue,scale,streams; hello, evalsha and minimal start the baseline servers the later rows use); default all")
	for _, a := range os.Args[1:] {
		if a == "-h" || a == "-help" || a == "--help" {
			flag.CommandLine.SetOutput(os.Stdout) // asked for: the usage is the answer, exit 0
		}
	}
	flag.Parse() // a bad flag: its error and the usage on stderr, exit 2
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opt, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	short      bool
	dur        time.Duration
	rounds     int
	conns      int
	users      int
	rows       int
	profileDir string
	verbose    bool
	only       string
	// sharedRedis runs against the configured Redis instead of a private redis-server.
	sharedRedis bool
}

func (o *options) tiny() {
	o.dur = 300 * time.Millisecond
	o.conns = 8
	o.users = 2000
	o.rows = 2000
}

func (o options) warmup() time.Duration {
	if o.short {
		return 100 * time.Millisecond
	}
	return 2 * time.Second
}

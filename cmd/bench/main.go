// Command bench measures flashsale against naive ceilings on this machine, in one run, and
// prints a table of rates, latencies and ratios:
//
//   - purchase attempts/s through the real api (auth, rate limit, coalescing, outbox relay to
//     the embedded Kafka broker) beside a bare Gin handler doing one EVALSHA of the same
//     purchase script per request;
//   - purchase attempts/s with two replicas behind Sentinels and the default
//     FLASHSALE_REDIS_ACK_REPLICAS (auto: both replicas) beside a primary without replicas
//     (replica.go: two apis, in turns), and each primary's CPU time per purchase;
//   - the purchase row beside the minimal service (minimal.go) turn by turn, and Redis's CPU
//     time and memory per order made, the api's beside the minimal service's;
//   - sold-out answers/s and catalogue/leaderboard reads/s beside a bare Gin hello handler,
//     and the sold-out answer and GET /api/items beside a bare Gin handler writing the api's
//     very reply, recorded once, to the same request bytes (replay.go);
//   - the reconciler's write path (internal/record) in rows/s beside pgx CopyFrom of the same
//     rows;
//   - purchase -> Postgres latency (request sent to row committed) at 75% of the purchase
//     row's rate with cmd/reconciler running;
//   - the scale rows (scale.go): idle Redis commands/s per api instance with 10 / 1,000 /
//     10,000 items and 1 or 3 apis, Redis commands per GET /api/orders, and GET /api/items
//     with 10,000 items, against a private redis-server (`-only scale` runs them alone).
//   - 10,000 catalogue streams (GET /api/items/stream) on one api: a stock change's arrival on
//     every stream, the api's memory, and its CPU per second streaming vs the same shoppers
//     polling GET /api/items once a second.
//
// Every server is a child process of its own (the api and reconciler binaries are built from
// this module; the baselines are this binary re-executed), and one load generator (load.go)
// drives them all. The api and its baseline servers are measured in turns (interleave.go),
// so a shared machine's changing load falls on both sides of each ratio, and each row also
// shows the servers' CPU time per request. `-short` runs every row tiny: CI checks that every
// row appears with a measurement, not the numbers.
//
//	go run ./cmd/bench            # full run (about three minutes)
//	go run ./cmd/bench -short     # seconds
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

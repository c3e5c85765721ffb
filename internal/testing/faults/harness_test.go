//go:build faults

// Package faults is the fault matrix: the api and reconciler binaries (built with -race), a
// private redis-server with AOF, a throw-away Postgres database, a Kafka-protocol broker and
// toxiproxy between them. Each scenario injects its fault for real (DEBUG SLEEP, resets,
// latency, kill -9, restarts), records every client call and checks the sale's invariants.
package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/testing/testenv"
	"github.com/flashsale/flashsale/internal/testing/testenv/procs"
)

const (
	topic      = "flashsale.orders"
	adminToken = "faults-admin-token-0123456789abcdef"
	jwtSecret  = "faults-jwt-secret-0123456789abcdef0123"
)

// bins are the api and reconciler binaries, built once with -race by TestMain.
var bins procs.Binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flashsale-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if bins, err = procs.Build("../../..", dir); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sale is one scenario's world.
type sale struct {
	t      *testing.T
	dir    string
	prefix string

	redisPort int
	redisSrv  *exec.Cmd
	// rdb reads the sale's Redis for the checks (DEBUG SLEEP, FLUSHDB on the single server):
	// direct to the single server, through Sentinel to the primary, or a cluster client.
	rdb       redis.UniversalClient
	sentinels *testenv.Replicated // the replicated topologies, else nil
	split     *testenv.Split      // the partitioned topologies, else nil
	splitCl   *testenv.SplitCluster
	cluster   *testenv.ReplicatedCluster
	toxics    *toxiproxy.ApiServer
	redisPx   *toxiproxy.Proxy // every process reaches Redis through it
	pgPx      *toxiproxy.Proxy // the reconciler reaches Postgres through it
	dsn       string           // direct
	db        *pgxpool.Pool
	broker    *kafkabroker.Broker

	env        []string
	apis       []*procs.Proc
	reconciler *procs.Proc
	shop       *procs.Shop
}

type saleOptions struct {
	reservationTTL time.Duration // default 10m
	extraEnv       []string
	topology       topology
}

// topology is the sale's Redis.
type topology int

const (
	single       topology = iota // one server with AOF, reached through toxiproxy
	sentinel                     // a primary and its replica behind three Sentinels
	cluster                      // a Redis Cluster of three masters, each with a replica
	split                        // a primary, two replicas and three Sentinels, each behind a partitionable proxy
	splitCluster                 // a Redis Cluster of three masters with two replicas each, behind partitionable proxies
)

// replicaArgs are the extra redis-server arguments of every data server of the replicated
// topologies: short replication timeouts, so a primary drops a replica that stopped answering
// within 2 s (what it writes afterwards is then on the primary alone: the replica really falls
// behind).
var replicaArgs = []string{"--repl-timeout", "2", "--repl-ping-replica-period", "1"}

func newSale(t *testing.T, opt saleOptions) *sale {
	t.Helper()
	setup := time.Now()
	defer func() { t.Logf("the sale's servers were up after %.1f s", time.Since(setup).Seconds()) }()
	s := &sale{t: t, dir: t.TempDir(), prefix: "f" + testenv.Token(4) + ":"}
	s.toxics = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	var redisAddrs string
	switch opt.topology {
	case sentinel:
		s.sentinels = testenv.ReplicatedRedis(t, 1, replicaArgs...)
		sentinels := s.sentinels.WithSentinels(t, 3)
		s.rdb = s.sentinels.FailoverClient(t)
		// The processes find the primary through the Sentinels only (FLASHSALE_REDIS_ADDRS
		// empty: the two exclude each other).
		redisAddrs = ""
		opt.extraEnv = append([]string{"FLASHSALE_REDIS_SENTINELS=" + strings.Join(sentinels, ","),
			"FLASHSALE_REDIS_MASTER_NAME=" + s.sentinels.MasterName}, opt.extraEnv...)
	case split:
		s.split = testenv.SplitRedis(t, 2, replicaArgs...)
		s.sentinels = s.split.Replicated
		s.rdb = s.split.Client(t)
		redisAddrs = ""
		opt.extraEnv = append([]string{"FLASHSALE_REDIS_SENTINELS=" + strings.Join(s.split.SentinelAddrs, ","),
			"FLASHSALE_REDIS_MASTER_NAME=" + s.split.MasterName}, opt.extraEnv...)
	case splitCluster:
		s.splitCl = testenv.SplitClusterRedis(t, replicaArgs...)
		s.rdb = s.splitCl.Client(t)
		redisAddrs = strings.Join(s.splitCl.Addrs, ",")
	case cluster:
		s.cluster = testenv.ClusterWithReplicas(t, append(replicaArgs, "--cluster-node-timeout", "1000")...)
		s.rdb = s.cluster.Client(t)
		redisAddrs = strings.Join(s.cluster.Addrs(), ",")
	default:
		s.redisPort = procs.FreePort(t)
		s.startRedis()
		t.Cleanup(s.stopRedis)
		c := redis.NewClient(&redis.Options{Addr: s.redisAddr(), MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		s.rdb = c
		s.redisPx = s.proxy("redis", s.redisAddr())
		redisAddrs = s.redisPx.Listen
	}

	s.dsn = testenv.Postgres(t)
	u, _ := url.Parse(s.dsn)
	s.pgPx = s.proxy("postgres", u.Host)
	u.Host = s.pgPx.Listen
	proxiedDSN := u.String()
	db, err := pgxpool.New(context.Background(), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	s.db = db
	s.broker = testenv.Kafka(t, topic, 3)

	ttl := opt.reservationTTL
	if ttl == 0 {
		ttl = 10 * time.Minute
	}
	s.env = procs.Env{
		RedisAddrs: redisAddrs, RedisPrefix: s.prefix, PostgresDSN: proxiedDSN, KafkaBrokers: s.broker.Addr(),
		KafkaTopic: topic, JWTSecret: jwtSecret, AdminToken: adminToken, ReservationTTL: ttl,
	}.List(opt.extraEnv...)
	// Every api is started before the sale, so the shop reads s.apis without a lock.
	s.shop = procs.NewShop(t, adminToken, 30*time.Second, func() []*procs.Proc { return s.apis })
	return s
}

// keys is the processes' key space (FLASHSALE_REDIS_PREFIX), for the checks.
func (s *sale) keys() keyspace.Space { return keyspace.Space{Prefix: s.prefix} }

// waitNoReservations waits until every reservation of the items was paid, cancelled or expired,
// so Redis stops changing before it is compared with Postgres.
func (s *sale) waitNoReservations(items map[string]int, within time.Duration) {
	s.t.Helper()
	s.waitFor("every reservation to expire", within, func() bool {
		for id := range items {
			if n, _ := s.rdb.HGet(context.Background(), s.keys().Item(id).Hash(), "reserved").Int(); n != 0 {
				return false
			}
		}
		return true
	})
}

func (s *sale) redisAddr() string { return "127.0.0.1:" + strconv.Itoa(s.redisPort) }

// startRedis runs the private server with an AOF fsynced on every write, so a kill -9 loses
// nothing it acknowledged, and DEBUG enabled for the stall.
func (s *sale) startRedis() {
	s.t.Helper()
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(s.redisPort),
		"--dir", s.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--enable-debug-command", "yes", "--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v (install it: apt-get install redis-server)", err)
	}
	s.redisSrv = cmd
	s.waitFor("redis-server to answer", 20*time.Second, func() bool {
		c := redis.NewClient(&redis.Options{Addr: s.redisAddr(), MaxRetries: -1})
		defer c.Close()
		return c.Ping(context.Background()).Err() == nil
	})
}

func (s *sale) stopRedis() {
	if s.redisSrv != nil && s.redisSrv.Process != nil {
		_ = s.redisSrv.Process.Kill()
		_ = s.redisSrv.Wait()
	}
}

// killRedis is kill -9 of the server; restartRedis starts it again from its AOF.
func (s *sale) killRedis()    { s.stopRedis() }
func (s *sale) restartRedis() { s.startRedis() }

func (s *sale) proxy(name, upstream string) *toxiproxy.Proxy {
	s.t.Helper()
	p := toxiproxy.NewProxy(s.toxics, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(p.Stop)
	return p
}

func (s *sale) addToxic(p *toxiproxy.Proxy, spec string) {
	s.t.Helper()
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		s.t.Fatalf("toxic %s: %v", spec, err)
	}
}

func (s *sale) removeToxic(p *toxiproxy.Proxy, name string) {
	s.t.Helper()
	if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		s.t.Fatalf("remove toxic %s: %v", name, err)
	}
}

// startAPI starts an api process and waits until /readyz answers 200.
func (s *sale) startAPI(extraEnv ...string) *procs.Proc {
	s.t.Helper()
	start := time.Now()
	p := procs.StartAPI(s.t, s.dir, fmt.Sprintf("api%d", len(s.apis)), bins.API, append(slices.Clone(s.env), extraEnv...))
	p.WaitReady(s.t)
	s.t.Logf("%s ready after %.1f s", p.Name, time.Since(start).Seconds())
	s.apis = append(s.apis, p)
	return p
}

// startReconciler starts the consumer and waits until it consumes.
func (s *sale) startReconciler(extraEnv ...string) *procs.Proc {
	s.t.Helper()
	p := procs.Start(s.t, s.dir, "reconciler", bins.Reconciler, append(slices.Clone(s.env), extraEnv...))
	s.waitFor("reconciler consuming", 60*time.Second, func() bool { return p.Logged("reconciler consuming") })
	s.reconciler = p
	return p
}

// waitFor polls cond until it holds or the deadline passes (a condition, never a fixed time).
// It logs how long it waited, so a run's log shows where a scenario spends its time.
func (s *sale) waitFor(what string, within time.Duration, cond func() bool) {
	s.t.Helper()
	start := time.Now()
	procs.WaitFor(s.t, what, within, cond)
	if d := time.Since(start); d >= time.Second {
		s.t.Logf("waited %.1f s for %s", d.Seconds(), what)
	}
}

// runReconciler runs a one-shot reconciler command (batch, restore) to its end.
func (s *sale) runReconciler(args ...string) (string, error) {
	cmd := exec.Command(bins.Reconciler, args...)
	cmd.Env = s.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// login mints tokens for n shoppers named prefix0..prefix(n-1).
func (s *sale) login(prefix string, n int) []string {
	s.t.Helper()
	users := make([]string, n)
	for i := range users {
		users[i] = prefix + strconv.Itoa(i)
	}
	start := time.Now()
	s.shop.Login(users)
	s.t.Logf("%d shoppers logged in in %.1f s", n, time.Since(start).Seconds())
	return users
}

// figures are one scenario's row of docs/reliability.md.
type figures struct {
	calls, created, unknown, duplicates, lost, oversold int
	unchanged                                           int // answered 503 "nothing was changed"
	recover                                             time.Duration
	slowest                                             time.Duration // the longest a purchase waited
}

// verify settles the sale and checks every invariant of the matrix (procs: stock adds up,
// nobody over a limit, every answered order exists and nothing unanswered beyond the calls of
// unknown outcome, Postgres holds exactly Redis's orders, batch reconciliation is clean); it
// returns the row.
func (s *sale) verify(items map[string]int) figures { return s.verifyThen(items, nil) }

// verifyThen is verify with more checks of Redis's ledger (nil: none), run before the wait for
// Postgres so that they report even when Postgres then differs.
func (s *sale) verifyThen(items map[string]int, more func(procs.Ledger)) figures {
	s.t.Helper()
	ledger := procs.CheckRedis(s.t, s.rdb, s.keys(), items)
	a := procs.CheckAnswers(s.t, s.shop.Calls(), ledger.Orders)
	if more != nil {
		more(ledger)
	}
	f := figures{calls: a.Calls, created: a.Created, unknown: a.Unknown, duplicates: a.Duplicates, lost: a.Lost,
		oversold: ledger.Broken, unchanged: a.Unchanged, slowest: a.Slowest}
	settleStart := time.Now()
	procs.WaitPostgres(s.t, s.db, ledger.Orders, 120*time.Second)
	s.t.Logf("Postgres settled %.1f s after the checks began", time.Since(settleStart).Seconds())
	batchStart := time.Now()
	procs.ReconcileBatch(s.t, bins.Reconciler, s.env)
	s.t.Logf("reconciler batch took %.1f s", time.Since(batchStart).Seconds())
	return f
}

// report prints the scenario's row for docs/reliability.md.
func report(t *testing.T, name string, f figures) {
	t.Logf("| %s | %d | %d | %d | %d | %d | %d | %d | %.1f | %.1f |", name, f.calls, f.created, f.unchanged, f.unknown,
		f.duplicates, f.lost, f.oversold, f.recover.Seconds(), f.slowest.Seconds())
	if path := os.Getenv("FAULTS_REPORT"); path != "" {
		fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			w := bufio.NewWriter(fh)
			fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %d | %.1f | %.1f |\n", name, f.calls, f.created, f.unchanged, f.unknown,
				f.duplicates, f.lost, f.oversold, f.recover.Seconds(), f.slowest.Seconds())
			w.Flush()
			fh.Close()
		}
	}
}

// metric reads one counter or gauge (no labels) from an api's /metrics.
func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	v, err := procs.Metric(base, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

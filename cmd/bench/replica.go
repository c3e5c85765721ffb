package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/keyspace"
)

const (
	replicaRowName     = "purchase attempts/s, two replicas, ACK_REPLICAS=auto (Sentinels)"
	replicaCPURowName  = "Redis CPU per purchase, two replicas, ACK_REPLICAS=auto (Sentinels)"
	replicaWaitRowName = "purchase attempts/s, two replicas, ACK_REPLICAS=auto beside 0"
)

// baseAPIEnv names an api binary (another build, such as main's) that the replica rows also
// run, with the default acknowledgement, as one more side of the same turns: a change to the
// write path is then measured against the code before it in one run.
const baseAPIEnv = "FLASHSALE_BENCH_BASE_API"

// A side of the replica rows: one api, and the Redis it writes to.
type replicaSide struct {
	name string
	bin  string   // the api binary
	env  []string // how it reaches Redis
	// primary is the side's primary; replicas are sampled with it (their CPU is the side's
	// cost too: they apply every write).
	primary  *redis.Client
	replicas []*redis.Client
	prefix   string
}

// replicas measures what waiting for every promotable replica costs, in turns: an api with the
// default ACK_REPLICAS (auto) on two replicas behind Sentinels, one with 0 on the same (replicated,
// never waited for), one on a primary without replicas, and FLASHSALE_BENCH_BASE_API's build
// when set. docs/performance.md, "Every promotable replica, behind Sentinels", has the rows.
func (b *bench) replicas(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "flashsale-bench-replica-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	names := []string{"primary", "replica1", "replica2", "lone"}
	addrs := make([]string, len(names))
	for i, name := range names {
		if addrs[i], err = freeAddr(); err != nil {
			return err
		}
		_, port, _ := strings.Cut(addrs[i], ":")
		args := []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
			"--dir", dir, "--dbfilename", name + ".rdb", "--logfile", ""}
		if strings.HasPrefix(name, "replica") {
			_, pport, _ := strings.Cut(addrs[0], ":")
			args = append(args, "--replicaof", "127.0.0.1", pport)
		}
		progress(b.out, "replicas: starting the %s redis-server on %s", name, addrs[i])
		srv, err := start(ctx, "redis-"+name, "redis-server", args, nil, addrs[i], "", b.logw)
		if err != nil {
			return fmt.Errorf("%w (install it: apt-get install redis-server)", err)
		}
		defer srv.stop()
	}
	primary := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer primary.Close()
	lone := redis.NewClient(&redis.Options{Addr: addrs[3]})
	defer lone.Close()
	var reps []*redis.Client
	for _, a := range addrs[1:3] {
		replica := redis.NewClient(&redis.Options{Addr: a})
		defer replica.Close()
		if err := waitSynced(ctx, replica); err != nil {
			return err
		}
		reps = append(reps, replica)
	}
	sentinels, stopSentinels, err := b.startSentinels(ctx, dir, addrs[0])
	defer stopSentinels()
	if err != nil {
		return err
	}
	broker, err := kafkabroker.Start(kafkabroker.Options{Addr: "127.0.0.1:0", Topic: "flashsale.orders", Partitions: 3})
	if err != nil {
		return err
	}
	defer broker.Close()

	// The Sentinels name the primary: no FLASHSALE_REDIS_ADDRS (the bench's own is set).
	onSentinels := []string{"FLASHSALE_REDIS_SENTINELS=" + strings.Join(sentinels, ","), "FLASHSALE_REDIS_ADDRS="}
	sides := []replicaSide{
		{name: "on the Sentinels, waiting for both replicas (auto)", bin: b.apiBin, env: onSentinels, primary: primary, replicas: reps},
		{name: "on the primary without replicas", bin: b.apiBin, env: []string{"FLASHSALE_REDIS_ADDRS=" + addrs[3]}, primary: lone},
		{name: "on the Sentinels, waiting for no replica (ACK_REPLICAS=0)", bin: b.apiBin,
			env: append(slices.Clone(onSentinels), "FLASHSALE_REDIS_ACK_REPLICAS=0"), primary: primary, replicas: reps},
	}
	if base := os.Getenv(baseAPIEnv); base != "" && !b.opt.short {
		sides = append(sides, replicaSide{name: "of " + base + " on the Sentinels (auto)", bin: base, env: onSentinels, primary: primary, replicas: reps})
	}
	apis := make([]*child, len(sides))
	adms := make([]string, len(sides))
	for k := range sides {
		sd := &sides[k]
		sd.prefix = fmt.Sprintf("%sack%d:", b.prefix, k)
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		if adms[k], err = freeAddr(); err != nil {
			return err
		}
		env := append([]string{
			"FLASHSALE_HTTP_ADDR=" + addr,
			"FLASHSALE_ADMIN_ADDR=" + adms[k],
			"FLASHSALE_REDIS_PREFIX=" + sd.prefix,
			"KAFKA_BROKERS=" + broker.Addr(),
			"FLASHSALE_JWT_SECRET=" + b.secret,
			"FLASHSALE_ADMIN_TOKEN=" + b.admin,
			"FLASHSALE_POSTGRES_DSN=" + b.pgDSN,
			"FLASHSALE_LIMIT_PURCHASE=" + purchaseLimit,
			"FLASHSALE_LIMIT_LOGIN_IP=off",
			// Nothing is paid here; two apis would otherwise both start a simulator on its port.
			"FLASHSALE_PAYMENT_PROVIDER=none",
		}, sd.env...)
		progress(b.out, "replicas: starting the api %s", sd.name)
		if apis[k], err = start(ctx, fmt.Sprintf("api-ack%d", k), sd.bin, nil, env, addr, "/readyz", b.logw); err != nil {
			return err
		}
		defer apis[k].stop()
		if err := b.adminAt(ctx, addr, "PUT", "/api/admin/items/"+benchItem, map[string]any{"name": "Bench",
			"category": "bench", "price_cents": 100, "stock": int64(1e12), "per_user_limit": int64(1e9)}); err != nil {
			return err
		}
	}
	loads := make([]load, len(sides))
	var prefixes []string
	for k, sd := range sides {
		loads[k] = load{addr: apis[k].addr, reqs: b.purchaseReqs(apis[k].addr, benchItem, "r", b.opt.users),
			conns: b.opt.conns, warmup: b.opt.warmup(), dur: b.opt.dur, pid: apis[k].cmd.Process.Pid,
			adm: adms[k], redis: func() redisSample {
				s := sampleRedisAt(sd.primary)
				for _, r := range sd.replicas {
					s.replicaCPU += sampleRedisAt(r).cpu
				}
				return s
			}}
		prefixes = append(prefixes, sd.prefix)
	}
	quiet := func(ctx context.Context) error {
		if err := waitQuiet(ctx, primary, prefixes, true); err != nil {
			return err
		}
		return waitQuiet(ctx, lone, prefixes, false)
	}
	progress(b.out, "replicas: purchases with two replicas (auto), with none, and with two not waited for, in turns")
	turns, err := b.replicaTurns(ctx, quiet, loads)
	if err != nil {
		return err
	}
	b.replicaRows(turns, sides)
	return nil
}

// replicaRows adds the replicas rows from the turns of the sides, in replicas' order: auto,
// none, ACK_REPLICAS=0, then the base api's when it ran.
func (b *bench) replicaRows(turns [][]result, sides []replicaSide) {
	res, base, ack0 := merge(turns[0]), merge(turns[1]), merge(turns[2])
	rateTurns, cpuTurns := turnRatios(turns[0], turns[1]), cpuRatios(turns[0], turns[1])
	progress(b.out, "replicas: rate two replicas (auto) over none, turn by turn: %s; Redis CPU per purchase: %s", rateTurns, cpuTurns)
	goal := "–"
	if base.rate() > 0 {
		x := res.rate() / base.rate()
		goal = fmt.Sprintf("≥ %.2f× %s (turns: %s)", replicaRateGoal, mark(x >= replicaRateGoal), rateTurns)
	}
	b.rows = append(b.rows, row{name: replicaRowName, res: &res, base: &base,
		baseName: "a primary without replicas", targetText: goal, want: 201,
		note: "an api on three Sentinels in front of a private primary with two replicas, with the default FLASHSALE_REDIS_ACK_REPLICAS (auto: every coalesced batch of purchases is followed by a WAIT for both replicas on its connection, and the relay confirms what it read with a WAIT pipelined behind its read), against an api on a private primary without replicas; all sides warmed up alike, then measured in turns (rotating), each turn after the replicas caught up and every outbox is drained; rate ratio per turn: " + rateTurns})
	waitTurns := turnRatios(turns[0], turns[2])
	goal = "–"
	if ack0.rate() > 0 {
		x := res.rate() / ack0.rate()
		goal = fmt.Sprintf("≥ %.2f× %s (turns: %s)", replicaRateGoal, mark(x >= replicaRateGoal), waitTurns)
	}
	b.rows = append(b.rows, row{name: replicaWaitRowName, res: &res, base: &ack0,
		baseName: "the same primary and replicas, ACK_REPLICAS=0", targetText: goal, want: 201,
		note: "the auto side against an api on the same Sentinels, primary and replicas with FLASHSALE_REDIS_ACK_REPLICAS=0 (the writes replicated, never waited for): what the WAIT costs apart from the replication; rate ratio per turn: " + waitTurns +
			"; Redis CPU per purchase (primary + both replicas): auto " + cpuSplit(res) + ", ACK_REPLICAS=0 " + cpuSplit(ack0) + ", no replicas " + cpuSplit(base)})
	if len(turns) > 3 {
		before := merge(turns[3])
		bt := turnRatios(turns[0], turns[3])
		b.rows = append(b.rows, row{name: replicaRowName + " (this build beside " + filepath.Base(sides[3].bin) + ")", res: &res, base: &before,
			baseName: sides[3].bin + ", same primary and replicas, auto", want: 201,
			ratioText: fmt.Sprintf("**%.2f×** (turns %s)", res.rate()/max(before.rate(), 1), bt),
			note: "the auto side against the api built from " + sides[3].bin + " on the same Sentinels, primary and replicas, auto; Redis CPU per purchase (primary + both replicas) " + cpuSplit(res) + " against " + cpuSplit(before) +
				"; the base's rate over none, turn by turn: " + turnRatios(turns[3], turns[1]) + " (" + fmt.Sprintf("%.2f×", before.rate()/max(base.rate(), 1)) + ")"})
	}
	if res.redis.cpu > 0 && base.redis.cpu > 0 {
		x := float64(res.redisPerOp()) / float64(base.redisPerOp())
		b.rows = append(b.rows, row{name: replicaCPURowName, text: usCell(res.redisPerOp()),
			baseText: "no replicas: " + usCell(base.redisPerOp()), ratioText: fmt.Sprintf("**%.2f×**", x),
			targetText: fmt.Sprintf("≤ %.2f× %s (turns: %s)", replicaCPUGoal, mark(x <= replicaCPUGoal), cpuTurns),
			note: "INFO cpu of each side's primary over its measured turns, per request answered (turn by turn: " + cpuTurns +
				"); with both replicas' (they apply every write): " + cpuSplit(res) + " against " + cpuSplit(base) +
				" (" + fmt.Sprintf("%.2f×", float64(res.redisPerOp()+res.replicaPerOp())/float64(max(base.redisPerOp(), 1))) +
				"); commands per purchase on the primary with two replicas: " + res.redis.perOp(res.n, 10) + "; with none: " + base.redis.perOp(base.n, 10)})
	}
}

// startSentinels starts three Sentinels (quorum 2) watching primary as mymaster, and waits
// until each lists both replicas; it returns their addresses and what stops them.
func (b *bench) startSentinels(ctx context.Context, dir, primary string) ([]string, func(), error) {
	host, port, _ := strings.Cut(primary, ":")
	var addrs []string
	var started []*child
	stop := func() {
		for _, c := range started {
			c.stop()
		}
	}
	for i := range 3 {
		addr, err := freeAddr()
		if err != nil {
			return nil, stop, err
		}
		_, sport, _ := strings.Cut(addr, ":")
		conf := fmt.Sprintf("%s/sentinel%d.conf", dir, i)
		body := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s 2\nsentinel down-after-milliseconds mymaster 5000\n", sport, dir, host, port)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, stop, err
		}
		progress(b.out, "replicas: starting Sentinel %d on %s", i+1, addr)
		srv, err := start(ctx, fmt.Sprintf("sentinel%d", i), "redis-server", []string{conf, "--sentinel"}, nil, addr, "", b.logw)
		if err != nil {
			return nil, stop, err
		}
		started = append(started, srv)
		addrs = append(addrs, addr)
	}
	for _, a := range addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		deadline := time.Now().Add(30 * time.Second)
		for {
			reps, err := sc.Replicas(ctx, "mymaster").Result()
			if err == nil && len(reps) == 2 {
				break
			}
			if time.Now().After(deadline) {
				sc.Close()
				return nil, stop, fmt.Errorf("bench: Sentinel %s does not list both replicas after 30 s", a)
			}
			time.Sleep(100 * time.Millisecond)
		}
		sc.Close()
	}
	return addrs, stop, nil
}

// The goals of the replica rows: the auto side's rate at least this share of each base's,
// and the primary's CPU per purchase unchanged (within what a shared machine's noise moves it).
const (
	replicaRateGoal = 0.85
	replicaCPUGoal  = 1.10
)

// replicaTurns measures the loads in turns like measure (interleave.go), fair to apis sharing
// primaries: all are warmed up alike first, the order rotates each round, and each turn starts
// only once the primaries are quiet (replicas caught up, outboxes drained), so no turn carries
// the one before it. It returns each load's turns.
func (b *bench) replicaTurns(ctx context.Context, quiet func(context.Context) error, loads []load) ([][]result, error) {
	turns := make([][]result, len(loads))
	rounds := max(1, b.opt.rounds)
	if b.opt.short {
		rounds = 1
	}
	warm := b.opt.warmup()
	for k := range loads {
		if err := warmEvery(ctx, loads[k], warm); err != nil {
			return turns, err
		}
	}
	for r := range rounds {
		for j := range loads {
			k := (j + r) % len(loads)
			l := loads[k]
			l.warmup, l.dur = min(warm, 300*time.Millisecond), b.opt.dur/time.Duration(rounds)
			if err := quiet(ctx); err != nil {
				return turns, err
			}
			res, err := l.run(ctx)
			if err != nil {
				return turns, err
			}
			turns[k] = append(turns[k], res)
		}
	}
	return turns, nil
}

// warmEvery runs l unmeasured until each of its requests (one per shopper) was answered once,
// for at least warm. A turn's load starts again at its first request, so a warm-up by time
// alone would leave the same tail of shoppers cold for each side's first measured turn.
func warmEvery(ctx context.Context, l load, warm time.Duration) error {
	n := len(l.reqs)
	seen := make([]atomic.Bool, n)
	var left atomic.Int64
	left.Store(int64(n))
	from := 0
	start := time.Now()
	for tries := 0; left.Load() > 0 || time.Since(start) < warm; tries++ {
		if tries == 50 {
			return fmt.Errorf("bench: %d of %d shoppers not answered after 50 warm-up runs", left.Load(), n)
		}
		// The load sends its requests from index 1 on: rotate the first one not answered
		// yet to there.
		w, off := l, (from+n-1)%n
		w.reqs = append(slices.Clone(l.reqs[off:]), l.reqs[:off]...)
		w.warmup, w.dur = 0, 500*time.Millisecond
		w.redis = nil
		w.onReply = func(i, _ int, _ []byte, _ time.Time) {
			if !seen[(i+off)%n].Swap(true) {
				left.Add(-1)
			}
		}
		if _, err := w.run(ctx); err != nil {
			return err
		}
		for k := range n {
			if j := (from + k) % n; !seen[j].Load() {
				from = j
				break
			}
		}
	}
	return nil
}

// cpuSplit is a result's Redis CPU per request: the primary's + the replicas' = their sum.
func cpuSplit(r result) string {
	return fmt.Sprintf("%s + %s = %s", usCell(r.redisPerOp()), usCell(r.replicaPerOp()), usCell(r.redisPerOp()+r.replicaPerOp()))
}

// cpuRatios lists each round's Redis CPU per request of a over b.
func cpuRatios(a, b []result) string {
	var s []string
	for i := range min(len(a), len(b)) {
		if c := b[i].redisPerOp(); c > 0 {
			s = append(s, fmt.Sprintf("%.2f", float64(a[i].redisPerOp())/float64(c)))
		}
	}
	return strings.Join(s, " ")
}

// waitQuiet waits (up to 10 s, then goes on) until the primary's replicas have acknowledged
// everything the primary wrote and the outbox streams under the prefixes are empty (the relays
// have published what the last turn left).
func waitQuiet(ctx context.Context, primary *redis.Client, prefixes []string, replicas bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		caught, err := true, error(nil)
		if replicas {
			caught, err = replicaCaughtUp(ctx, primary)
		}
		if err != nil {
			return err
		}
		left := int64(0)
		if caught {
			left, err = outboxLeft(ctx, primary, prefixes)
			if err != nil {
				return err
			}
		}
		if caught && left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			progress(os.Stderr, "replicas: not quiet after 10 s (replica caught up: %v, outbox entries: %d); measuring anyway", caught, left)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// replicaCaughtUp reports whether every replica acknowledged the master_repl_offset read first.
// Not equality: the apis write now and then, and a WAIT's own REPLCONF GETACK moves the
// primary's offset past what the replicas report.
func replicaCaughtUp(ctx context.Context, primary *redis.Client) (bool, error) {
	master, _, err := replicationOffsets(ctx, primary)
	if err != nil {
		return false, err
	}
	// Replicas acknowledge every second on their own; a WAIT asks them at once.
	if err := primary.Do(ctx, "WAIT", 2, 100).Err(); err != nil {
		return false, err
	}
	_, acked, err := replicationOffsets(ctx, primary)
	if err != nil || len(acked) == 0 {
		return false, err
	}
	for _, a := range acked {
		if a < master {
			return false, nil
		}
	}
	return true, nil
}

// replicationOffsets reads a primary's master_repl_offset and each replica's acknowledged offset.
func replicationOffsets(ctx context.Context, primary *redis.Client) (master int64, acked []int64, err error) {
	info, err := primary.Info(ctx, "replication").Result()
	if err != nil {
		return 0, nil, err
	}
	master = -1
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case k == "master_repl_offset":
			master, _ = strconv.ParseInt(v, 10, 64)
		case strings.HasPrefix(k, "slave") && strings.Contains(v, "offset="):
			for _, f := range strings.Split(v, ",") {
				if o, ok := strings.CutPrefix(f, "offset="); ok {
					n, _ := strconv.ParseInt(o, 10, 64)
					acked = append(acked, n)
				}
			}
		}
	}
	return master, acked, nil
}

// outboxLeft counts the entries in the outbox streams of the apis' prefixes.
func outboxLeft(ctx context.Context, rdb *redis.Client, prefixes []string) (int64, error) {
	pipe := rdb.Pipeline()
	var cmds []*redis.IntCmd
	for _, p := range prefixes {
		keys := keyspace.Space{Prefix: p}
		cmds = append(cmds, pipe.XLen(ctx, keys.RankOutbox()))
		for n := range keyspace.Shards {
			cmds = append(cmds, pipe.XLen(ctx, keys.Shard(n).Outbox()))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// waitSynced waits until the replica's link to its primary is up.
func waitSynced(ctx context.Context, replica *redis.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, _ := replica.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the replica did not sync with its primary within 30 s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// adminAt sends one admin request to the api at addr and wants a 2xx.
// A 503 ("nothing was changed": the replicas are still joining the set) is tried again for a
// while: the contract makes it safe.
func (b *bench) adminAt(ctx context.Context, addr, method, path string, body any) error {
	j, _ := json.Marshal(body)
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+path, bytes.NewReader(j))
		req.Header.Set("Authorization", "Bearer "+b.admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("bench: %s %s: %w", method, path, err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode/100 == 2:
			return nil
		case resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline):
			sleepCtx(ctx, 200*time.Millisecond)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		default:
			return fmt.Errorf("bench: %s %s: %d %s", method, path, resp.StatusCode, msg)
		}
	}
}

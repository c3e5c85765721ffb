package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
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
	replicaRowName    = "purchase attempts/s, one replica, ACK_REPLICAS=1"
	replicaCPURowName = "Redis CPU per purchase, one replica, ACK_REPLICAS=1"
)

// replicas measures what acknowledging only replicated changes costs (issue 27): a private
// primary with one replica, and two apis on it that differ only in FLASHSALE_REDIS_ACK_REPLICAS
// (1: every coalesced batch of purchases waits for the replica with WAIT; 0: it does not),
// measured in turns. The rows give the rate ratio and the primary's CPU time per purchase.
func (b *bench) replicas(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "flashsale-bench-replica-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var addrs [2]string
	for i, name := range []string{"primary", "replica"} {
		if addrs[i], err = freeAddr(); err != nil {
			return err
		}
		_, port, _ := strings.Cut(addrs[i], ":")
		args := []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
			"--dir", dir, "--dbfilename", name + ".rdb", "--logfile", ""}
		if i == 1 {
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
	replica := redis.NewClient(&redis.Options{Addr: addrs[1]})
	defer replica.Close()
	if err := waitSynced(ctx, replica); err != nil {
		return err
	}
	broker, err := kafkabroker.Start(kafkabroker.Options{Addr: "127.0.0.1:0", Topic: "flashsale.orders", Partitions: 3})
	if err != nil {
		return err
	}
	defer broker.Close()

	var apis [2]*child
	var adms [2]string
	for ack := range apis {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		if adms[ack], err = freeAddr(); err != nil {
			return err
		}
		env := []string{
			"FLASHSALE_HTTP_ADDR=" + addr,
			"FLASHSALE_ADMIN_ADDR=" + adms[ack],
			"FLASHSALE_REDIS_ADDRS=" + addrs[0],
			fmt.Sprintf("FLASHSALE_REDIS_ACK_REPLICAS=%d", ack),
			fmt.Sprintf("FLASHSALE_REDIS_PREFIX=%sack%d:", b.prefix, ack),
			"KAFKA_BROKERS=" + broker.Addr(),
			"FLASHSALE_JWT_SECRET=" + b.secret,
			"FLASHSALE_ADMIN_TOKEN=" + b.admin,
			"FLASHSALE_POSTGRES_DSN=" + b.pgDSN,
			"FLASHSALE_LIMIT_PURCHASE=" + purchaseLimit,
			"FLASHSALE_LIMIT_LOGIN_IP=off",
		}
		progress(b.out, "replicas: starting the api with FLASHSALE_REDIS_ACK_REPLICAS=%d", ack)
		if apis[ack], err = start(ctx, fmt.Sprintf("api-ack%d", ack), b.apiBin, nil, env, addr, "/readyz", b.logw); err != nil {
			return err
		}
		defer apis[ack].stop()
		if err := b.adminAt(ctx, addr, "PUT", "/api/admin/items/"+benchItem, map[string]any{"name": "Bench",
			"category": "bench", "price_cents": 100, "stock": int64(1e12), "per_user_limit": int64(1e9)}); err != nil {
			return err
		}
	}
	sample := func() redisSample { return sampleRedisAt(primary) }
	loadOf := func(ack int) load {
		return load{addr: apis[ack].addr, reqs: b.purchaseReqs(apis[ack].addr, benchItem, "r", b.opt.users),
			conns: b.opt.conns, warmup: b.opt.warmup(), dur: b.opt.dur, pid: apis[ack].cmd.Process.Pid,
			adm: adms[ack], redis: sample}
	}
	quiet := func(ctx context.Context) error {
		return waitQuiet(ctx, primary, b.prefix)
	}
	progress(b.out, "replicas: purchases with ACK_REPLICAS=1 and =0, in turns")
	turns, err := b.replicaTurns(ctx, quiet, loadOf(1), loadOf(0))
	if err != nil {
		return err
	}
	res, base := merge(turns[0]), merge(turns[1])
	rateTurns, cpuTurns := turnRatios(turns[0], turns[1]), cpuRatios(turns[0], turns[1])
	progress(b.out, "replicas: rate ACK_REPLICAS=1 over =0, turn by turn: %s; primary CPU per purchase: %s", rateTurns, cpuTurns)
	goal := "–"
	if base.rate() > 0 {
		x := res.rate() / base.rate()
		goal = fmt.Sprintf("≥ %.2f× %s (turns: %s)", replicaRateGoal, mark(x >= replicaRateGoal), rateTurns)
	}
	b.rows = append(b.rows, row{name: replicaRowName, res: &res, base: &base,
		baseName: "ACK_REPLICAS=0, same primary and replica", targetText: goal, want: 201,
		note: "two apis on one private primary with one replica, both warmed up alike, then measured in turns (ABBA...), each turn after the replica has caught up and both outboxes are drained; with 1, every coalesced batch of purchases is followed by a WAIT on its connection and answered once the replica holds it, and the relay confirms what it read with a WAIT pipelined behind its read; rate ratio per turn: " + rateTurns})
	if res.redis.cpu > 0 && base.redis.cpu > 0 {
		x := float64(res.redisPerOp()) / float64(base.redisPerOp())
		b.rows = append(b.rows, row{name: replicaCPURowName, text: usCell(res.redisPerOp()),
			baseText: "ACK_REPLICAS=0: " + usCell(base.redisPerOp()), ratioText: fmt.Sprintf("**%.2f×**", x),
			targetText: fmt.Sprintf("≤ %.2f× %s (turns: %s)", replicaCPUGoal, mark(x <= replicaCPUGoal), cpuTurns),
			note: "INFO cpu of the primary over each side's measured turns, per request answered (turn by turn: " + cpuTurns +
				"); commands per purchase with 1: " + res.redis.perOp(res.n, 10) + "; with 0: " + base.redis.perOp(base.n, 10)})
	}
	return nil
}

// The goals of the replica rows (issue 27): the rate with ACK_REPLICAS=1 at least this share
// of the rate with 0, and the primary's CPU per purchase unchanged (within what a shared
// machine's noise moves it).
const (
	replicaRateGoal = 0.85
	replicaCPUGoal  = 1.10
)

// replicaTurns measures api and base in turns like measure (interleave.go), with what a fair
// comparison of two apis on one primary and its replica needs besides: both are warmed up
// alike before the first measured turn (so neither pays for the other's first keys, token
// checks and pools), the order alternates ABBA..., and every turn starts only once the primary
// is quiet (quiet: the replica has caught up and the other api's relay has drained its
// outbox), so no turn carries the one before it. It returns each side's turns.
func (b *bench) replicaTurns(ctx context.Context, quiet func(context.Context) error, api, base load) ([2][]result, error) {
	var turns [2][]result
	loads := [2]load{api, base}
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

// warmEvery runs l unmeasured until every one of its requests (one per shopper) has been
// answered once, at least for warm: every shopper's token verified and cached and its keys
// made, by both apis alike, before anything is measured. A turn's load starts again at the
// first request, so a warm-up by time alone would leave the same tail of shoppers cold for
// the first measured turn of each side (one that runs slower warms fewer of them).
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

// waitQuiet waits (up to 10 s, then goes on) until the primary's replica has acknowledged
// everything the primary wrote and the outbox streams under prefix are empty (the relays have
// published what the last turn left).
func waitQuiet(ctx context.Context, primary *redis.Client, prefix string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		caught, err := replicaCaughtUp(ctx, primary)
		if err != nil {
			return err
		}
		left := int64(0)
		if caught {
			left, err = outboxLeft(ctx, primary, prefix)
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

// replicaCaughtUp reports whether every replica of primary acknowledged its whole
// replication stream (INFO replication: each slave's offset equals master_repl_offset).
// Replicas acknowledge every second on their own; a WAIT asks them at once.
func replicaCaughtUp(ctx context.Context, primary *redis.Client) (bool, error) {
	if err := primary.Do(ctx, "WAIT", 1, 100).Err(); err != nil {
		return false, err
	}
	info, err := primary.Info(ctx, "replication").Result()
	if err != nil {
		return false, err
	}
	var master int64 = -1
	var acked []int64
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
	if len(acked) == 0 {
		return false, nil
	}
	for _, a := range acked {
		if a < master {
			return false, nil
		}
	}
	return true, nil
}

// outboxLeft counts the entries in both apis' outbox streams (prefixes prefix+"ack0:" and
// prefix+"ack1:").
func outboxLeft(ctx context.Context, rdb *redis.Client, prefix string) (int64, error) {
	pipe := rdb.Pipeline()
	var cmds []*redis.IntCmd
	for ack := range 2 {
		keys := keyspace.Space{Prefix: fmt.Sprintf("%sack%d:", prefix, ack)}
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
func (b *bench) adminAt(ctx context.Context, addr, method, path string, body any) error {
	j, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+path, bytes.NewReader(j))
	req.Header.Set("Authorization", "Bearer "+b.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("bench: %s %s: %d", method, path, resp.StatusCode)
	}
	return nil
}

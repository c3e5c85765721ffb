package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/kafkabroker"
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
		l := load{addr: apis[ack].addr, reqs: b.purchaseReqs(apis[ack].addr, benchItem, "r", b.opt.users),
			conns: b.opt.conns, warmup: b.opt.warmup(), dur: b.opt.dur, pid: apis[ack].cmd.Process.Pid,
			adm: adms[ack], redis: sample}
		return l
	}
	progress(b.out, "replicas: purchases with ACK_REPLICAS=1 and =0, in turns")
	res, bases, err := b.measure(ctx, "replica", loadOf(1), loadOf(0))
	if err != nil {
		return err
	}
	base := &bases[0]
	goal := "–"
	if base.rate() > 0 {
		goal = fmt.Sprintf("≥ 0.85× %s", mark(res.rate()/base.rate() >= 0.85))
	}
	b.rows = append(b.rows, row{name: replicaRowName, res: &res, base: base,
		baseName: "ACK_REPLICAS=0, same primary and replica", targetText: goal, want: 201,
		note: "two apis on one private primary with one replica, measured in turns; with 1, every coalesced batch of purchases is followed by a WAIT on its connection and answered once the replica holds it"})
	if res.redis.cpu > 0 && base.redis.cpu > 0 {
		x := float64(res.redisPerOp()) / float64(base.redisPerOp())
		b.rows = append(b.rows, row{name: replicaCPURowName, text: usCell(res.redisPerOp()),
			baseText: "ACK_REPLICAS=0: " + usCell(base.redisPerOp()), ratioText: fmt.Sprintf("**%.2f×**", x),
			note: "INFO cpu of the primary over each side's measured turns, per request answered; commands per purchase with 1: " +
				res.redis.perOp(res.n, 6) + "; with 0: " + base.redis.perOp(base.n, 6)})
	}
	return nil
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

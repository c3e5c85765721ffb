package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
)

// The retention row: Redis memory is bounded in time. A sale of N orders, all made final (half
// paid, half expired) and pruned by a reconciler with a short FLASHSALE_ORDER_RETENTION, leaves
// used_memory back at its start; only the paid users' allowances (the item's held and paidby
// fields) stay, by design.
const (
	retentionRowName = "Redis memory after retention"
	retentionItem    = "retained"
	// Short windows so the row takes seconds: reservations lapse after 5 s, the idempotency
	// window and the retention are 5 s (the retention may not be shorter than the window).
	retentionReservation = 5 * time.Second
	retentionTTL         = 5 * time.Second
	// retentionLeft is the share of the sale's memory growth that may stay, apart from the paid
	// shoppers' allowances: the goal.
	retentionLeft = 0.05
)

func (b *bench) retention(ctx context.Context) error {
	n := 20000
	if b.opt.short {
		n = 300 // -short checks the row, not its figure: it also skips the waits for call records
	}
	progress(b.out, "retention: a sale of %d orders, made final, pruned after %s", n, retentionTTL)
	prefix := b.prefix + "r:"
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	kafkaAddr, err := freeAddr()
	if err != nil {
		return err
	}
	common := []string{
		"FLASHSALE_REDIS_PREFIX=" + prefix, "FLASHSALE_POSTGRES_DSN=" + b.pgDSN,
		"FLASHSALE_RESERVATION_TTL=" + retentionReservation.String(),
		"FLASHSALE_IDEMPOTENCY_TTL=" + retentionTTL.String(),
		"FLASHSALE_ORDER_RETENTION=" + retentionTTL.String(),
		"FLASHSALE_JWT_SECRET=" + b.secret, "FLASHSALE_ADMIN_TOKEN=" + b.admin,
	}
	api, err := start(ctx, "api (retention)", b.apiBin, nil, append([]string{
		"FLASHSALE_HTTP_ADDR=" + addr, "FLASHSALE_EMBEDDED_KAFKA_ADDR=" + kafkaAddr,
		"FLASHSALE_PAYMENT_PROVIDER=none", "FLASHSALE_LIMIT_LOGIN_IP=off",
	}, common...), addr, "/readyz", b.logw)
	if err != nil {
		return err
	}
	defer api.stop()
	recAdm, err := freeAddr()
	if err != nil {
		return err
	}
	rec, err := start(ctx, "reconciler (retention)", b.recBin, nil, append([]string{
		"FLASHSALE_EMBEDDED_KAFKA_ADDR=" + kafkaAddr, "FLASHSALE_ADMIN_ADDR=" + recAdm,
	}, common...), recAdm, "/metrics", b.logw)
	if err != nil {
		return err
	}
	defer rec.stop()
	saved := b.api
	b.api = api // admin2xx talks to b.api
	err = b.admin2xx(ctx, "PUT", "/api/admin/items/"+retentionItem, map[string]any{
		"name": "Retained", "category": "bench", "price_cents": 100, "stock": n, "per_user_limit": 1})
	b.api = saved
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, b.pgDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	// Every script call leaves a record for recordLife (lua/lib/once.lua); the processes' own
	// periodic calls (the pruning pass's lock, the api's ticks) keep a steady number of them.
	// The full run lets that steady state build up before it takes the start.
	recordLife := exactlyonce.CallDeadline + exactlyonce.ClockSkew + time.Second
	if !b.opt.short {
		sleepCtx(ctx, recordLife)
	}
	start := b.usedMemory(ctx)
	ids, err := b.retentionSale(ctx, addr, n)
	if err != nil {
		return err
	}
	peak := b.usedMemory(ctx)
	// Every order final in Postgres (the unpaid half expires by itself), then pruned.
	for _, c := range []struct{ what, sql string }{
		{"final in Postgres", `SELECT count(*) FROM orders WHERE item_id = $1 AND status <> 'reserved'`},
		{"pruned from Redis", `SELECT count(*) FROM orders WHERE item_id = $1 AND pruned_at IS NOT NULL`},
	} {
		if err := waitCount(ctx, conn, c.sql, len(ids), 120*time.Second); err != nil {
			return fmt.Errorf("bench: retention: orders %s: %w", c.what, err)
		}
	}
	// What stays by design: the paid shoppers' allowances (the per-user limit holds for ever).
	k := keyspace.Space{Prefix: prefix}.Item(retentionItem)
	var allowances int64
	for _, key := range []string{k.Held(), k.PaidBy()} {
		m, _ := b.rdb.MemoryUsage(ctx, key, 0).Result()
		allowances += m
	}
	// The sale's last call records (the pruning pass's) expire recordLife after their calls:
	// the figure is taken once they have.
	if !b.opt.short {
		sleepCtx(ctx, recordLife+2*time.Second)
	}
	goal := start + int64(retentionLeft*float64(peak-start))
	after := b.usedMemory(ctx) - allowances
	mb := func(x int64) string { return fmt.Sprintf("%.1f MB", float64(x)/1e6) }
	perOrder := func(x int64) string { return fmt.Sprintf("%+d B per order", x/int64(len(ids))) }
	b.rows = append(b.rows, row{
		name: retentionRowName,
		text: fmt.Sprintf("%s after (start %s), %s; allowances kept %s, %s", mb(after), mb(start), perOrder(after-start),
			mb(allowances), perOrder(allowances)),
		baseText:   fmt.Sprintf("during the sale: %s, %s", mb(peak), perOrder(peak-start)),
		ratioText:  fmt.Sprintf("%.1f%% of the sale's growth left", 100*float64(after-start)/float64(max(1, peak-start))),
		targetText: fmt.Sprintf("back to its start (≤ %.0f%% left) %s", 100*retentionLeft, mark(after <= goal)),
		note: fmt.Sprintf("used_memory (less client buffers) of the %s around a sale of %d orders (half paid, half expired) through an api and a reconciler "+
			"of their own with FLASHSALE_ORDER_RETENTION=%s: at the start, after the purchases, and once the reconciler pruned "+
			"every order and the call records expired, less what stays by design: the paid shoppers' allowances "+
			"(the item's held and paidby hashes, MEMORY USAGE), shown beside it",
			b.redisKind(), len(ids), retentionTTL),
	})
	return nil
}

// retentionSale buys n orders of the retention item, each by its own shopper, 32 at a time,
// and pays every other one; it returns the order ids.
func (b *bench) retentionSale(ctx context.Context, addr string, n int) ([]string, error) {
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				tok := token(b.secret, "ret"+strconv.Itoa(i))
				body, err := post(ctx, client, "http://"+addr+"/api/items/"+retentionItem+"/purchase", tok, `{"quantity":1}`, 201)
				if err == nil {
					if ids[i] = orderID(body); ids[i] == "" {
						err = fmt.Errorf("bench: retention: no order id in %s", body)
					}
				}
				if err == nil && i%2 == 0 {
					// On a busy machine a payment may come after the reservation lapsed: 409
					// order_expired, a final order all the same.
					if _, err = post(ctx, client, "http://"+addr+"/api/orders/"+ids[i]+"/pay", tok, "", 200); err != nil &&
						strings.Contains(err.Error(), "order_expired") {
						err = nil
					}
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return ids, nil
}

// post sends one request and wants status want; it returns the body.
func post(ctx context.Context, c *http.Client, url, tok, body string, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != want {
		err = fmt.Errorf("bench: POST %s: %d %s, want %d", url, resp.StatusCode, bytes.TrimSpace(out), want)
	}
	return out, err
}

// waitCount waits until query (with the retention item as $1) counts want, while the count
// keeps moving (at most stall without progress).
func waitCount(ctx context.Context, conn *pgx.Conn, query string, want int, stall time.Duration) error {
	last, moved := -1, time.Now()
	for {
		var got int
		if err := conn.QueryRow(ctx, query, retentionItem).Scan(&got); err != nil {
			return err
		}
		if got >= want {
			return nil
		}
		if got != last {
			last, moved = got, time.Now()
		}
		if time.Since(moved) > stall {
			return fmt.Errorf("%d of %d after %s without progress", got, want, stall)
		}
		sleepCtx(ctx, 200*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// usedMemory is the Redis server's used_memory less its clients' buffers (INFO memory:
// mem_clients_normal), 0 when it does not answer. The connections a sale opens stay in the
// clients' pools afterwards; what is measured is what the data holds.
func (b *bench) usedMemory(ctx context.Context) int64 {
	info, err := b.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0
	}
	var used, clients int64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		x, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "used_memory":
			used = x
		case "mem_clients_normal":
			clients = x
		}
	}
	return used - clients
}

func (b *bench) redisKind() string {
	if b.redisInfo != nil {
		return "private redis-server"
	}
	return "shared Redis (other clients' keys move it too)"
}

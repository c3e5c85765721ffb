package main

import (
	"context"
	_ "embed"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
)

// The minimal service (issue 19) is the purchase baseline a shop choosing between flashsale and
// a simple service would compare with: Gin binding the JSON body, one EVALSHA per request of a
// four-write script (minimal_purchase.lua), a JSON reply. No auth, no rate limit, no outbox, no
// idempotency, no reservation expiry, no call record, go-redis with its default options.
//
//go:embed minimal_purchase.lua
var minimalPurchaseSrc string

var minimalPurchase = redis.NewScript(minimalPurchaseSrc)

// minimalKeys are the minimal service's keys under prefix: item hash, orders, units per user.
func minimalKeys(prefix string) []string {
	return []string{prefix + "{bench}:item", prefix + "{bench}:orders", prefix + "{bench}:bought"}
}

// minimalHandler is the minimal service's purchase: POST /purchase/:user {"quantity":N}.
func minimalHandler() (gin.HandlerFunc, error) {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	if err := minimalPurchase.Load(context.Background(), rdb).Err(); err != nil {
		return nil, err
	}
	keys := minimalKeys(os.Getenv(prefixEnv))
	return func(c *gin.Context) {
		var body struct {
			Quantity int64 `json:"quantity" binding:"required,min=1"`
		}
		if err := c.ShouldBindJSON(&body); err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		res, err := minimalPurchase.Run(c.Request.Context(), rdb, keys, c.Param("user"), body.Quantity).Int64Slice()
		if err != nil || len(res) != 2 {
			c.JSON(http.StatusServiceUnavailable, gin.H{"error": fmt.Sprint(err)})
			return
		}
		if res[0] == 0 {
			c.JSON(http.StatusConflict, gin.H{"error": "sold_out", "stock_left": res[1]})
			return
		}
		c.JSON(http.StatusCreated, gin.H{"order_id": res[0], "stock_left": res[1]})
	}, nil
}

// minimal starts the minimal service with stock that never runs out.
func (b *bench) minimal(ctx context.Context) error {
	progress(b.out, "starting the minimal service (Gin + one 4-write EVALSHA per purchase)")
	prefix := b.prefix + "m:"
	if err := b.rdb.HSet(ctx, minimalKeys(prefix)[0], "stock", int64(1e12), "seq", 0).Err(); err != nil {
		return err
	}
	var err error
	b.minSrv, err = b.startBaseline(ctx, "minimal", prefix)
	return err
}

// The purchase rows' names (rowNames).
const (
	minimalRowName  = "purchase attempts/s beside the minimal service"
	apiCPURowName   = "api CPU per purchase beside the hello's per request"
	redisCPURowName = "Redis CPU per purchase"
)

// purchase measures purchases through the api in turns with the bare Gin + purchase.lua server,
// the minimal service and the hello (for the CPU ratio), and, on the bench's private Redis,
// Redis's CPU time per purchase of each.
func (b *bench) purchase(ctx context.Context) error {
	progress(b.out, "purchases through the api")
	var bases []load
	at := map[string]int{}
	add := func(name string, l load) { at[name] = len(bases); bases = append(bases, l) }
	for _, srv := range []struct {
		name string
		c    *child
	}{{"evalsha", b.evalSrv}, {"minimal", b.minSrv}} {
		if srv.c == nil {
			continue
		}
		reqs := make([][]byte, b.opt.users)
		for i := range reqs {
			reqs[i] = request("POST", srv.c.addr, "/purchase/u"+itoa(i), nil, `{"quantity":1}`)
		}
		add(srv.name, b.load(srv.c.addr, reqs))
	}
	if hello := b.helloLoads(); len(hello) > 0 {
		add("hello", hello[0])
	}
	res, got, err := b.measure(ctx, "purchase", b.load(b.api.addr, b.purchaseReqs(b.api.addr, benchItem, "u", b.opt.users)), bases...)
	if err != nil {
		return err
	}
	base := func(name string) *result {
		if i, ok := at[name]; ok {
			return &got[i]
		}
		return nil
	}
	b.rows = append(b.rows,
		row{name: "purchase attempts/s", baseName: "bare Gin + EVALSHA", res: &res, base: base("evalsha"), target: 1.0, want: 201},
		row{name: minimalRowName, baseName: "minimal service", res: &res, base: base("minimal"), target: 1.0, want: 201})
	if h := base("hello"); h != nil && h.cpuPerOp() > 0 && res.cpuPerOp() > 0 {
		x := float64(res.cpuPerOp()) / float64(h.cpuPerOp())
		b.rows = append(b.rows, row{name: apiCPURowName, text: usCell(res.cpuPerOp()),
			baseText: "bare Gin hello: " + usCell(h.cpuPerOp()), ratioText: fmt.Sprintf("**%.2f×**", x),
			targetText: fmt.Sprintf("≤ 2× %s", mark(x <= 2))})
	}
	if res.redis.cpu > 0 {
		var bs []string
		for _, n := range []struct{ key, name string }{{"minimal", "minimal service"}, {"evalsha", "bare Gin + EVALSHA"}} {
			if r := base(n.key); r != nil {
				bs = append(bs, n.name+": "+usCell(r.redisPerOp()))
			}
		}
		r := row{name: redisCPURowName, text: usCell(res.redisPerOp()), baseText: strings.Join(bs, "; "),
			targetText: fmt.Sprintf("≤ 12 µs %s", mark(res.redisPerOp() <= 12*time.Microsecond)),
			note: "INFO cpu (used_cpu_sys + used_cpu_user) of the bench's private redis-server over each side's measured turns, per request answered; " +
				"the api's per purchase by INFO commandstats (calls, then µs of wall time inside the command, which for evalsha includes the commands the script calls): " + res.redis.perOp(res.n, 10)}
		if m := base("minimal"); m != nil && m.redisPerOp() > 0 {
			r.ratioText = fmt.Sprintf("**%.2f×** the minimal's", float64(res.redisPerOp())/float64(m.redisPerOp()))
		}
		b.rows = append(b.rows, r)
	}
	return nil
}

func usCell(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

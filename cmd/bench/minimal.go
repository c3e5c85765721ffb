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

// The minimal service is the purchase baseline a shop might write instead: Gin binding the JSON
// body, one EVALSHA of a four-write script (minimal_purchase.lua), a JSON reply; no auth, rate
// limit, outbox, idempotency, expiry or call record, and go-redis with its default options.
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
	redisMemRowName = "Redis memory per order"
)

// The goals for what a purchase costs Redis: CPU time at most this share of the minimal
// service's, and memory per order made at most this many bytes.
const (
	redisCPUGoal = 0.6
	redisMemGoal = 250
)

// purchase measures purchases through the api in turns with the bare Gin + purchase.lua server,
// the minimal service and the hello (for the CPU ratio), and, on the bench's private Redis,
// Redis's CPU time and memory per order made of each.
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
	res, got, turns, err := b.measureTurns(ctx, "purchase", b.load(b.api.addr, b.purchaseReqs(b.api.addr, benchItem, "u", b.opt.users)), bases...)
	if err != nil {
		return err
	}
	base := func(name string) *result {
		if i, ok := at[name]; ok {
			return &got[i]
		}
		return nil
	}
	minimal := minimalRow(res, base("minimal"))
	if i, ok := at["minimal"]; ok {
		// The goal holds in every run: each turn's ratio is shown, the lowest decides the mark.
		var low float64
		minimal.ratioText, low = turnCells(turns[0], turns[i+1])
		minimal.targetText = fmt.Sprintf("≥ 1.0× in every turn %s", mark(low >= 1.0))
	}
	b.rows = append(b.rows,
		row{name: "purchase attempts/s", baseName: "bare Gin + EVALSHA", res: &res, base: base("evalsha"), target: 1.0, want: 201},
		minimal)
	if h := base("hello"); h != nil && h.cpuPerOp() > 0 && res.cpuPerOp() > 0 {
		x := float64(res.cpuPerOp()) / float64(h.cpuPerOp())
		b.rows = append(b.rows, row{name: apiCPURowName, text: usCell(res.cpuPerOp()),
			baseText: "bare Gin hello: " + usCell(h.cpuPerOp()), ratioText: fmt.Sprintf("**%.2f×**", x),
			targetText: fmt.Sprintf("≤ 2× %s", mark(x <= 2))})
	}
	if res.redis.cpu > 0 {
		b.rows = append(b.rows, redisRows(res, base("minimal"), base("evalsha"))...)
	}
	return nil
}

func minimalRow(res result, m *result) row {
	return row{name: minimalRowName, baseName: "minimal service", res: &res, base: m, target: 1.0, want: 201}
}

// turnCells is the ratio cell of a rate row shown turn by turn: the merged ratio with each
// turn's; low is the lowest turn's.
func turnCells(ours, theirs []result) (ratio string, low float64) {
	var tr []string
	low = -1
	for i := range min(len(ours), len(theirs)) {
		if r := theirs[i].rate(); r > 0 {
			x := ours[i].rate() / r
			tr = append(tr, fmt.Sprintf("%.2f", x))
			if low < 0 || x < low {
				low = x
			}
		}
	}
	var all float64
	if m, t := merge(ours), merge(theirs); t.rate() > 0 {
		all = m.rate() / t.rate()
	}
	return fmt.Sprintf("**%.2f×** (turns %s)", all, strings.Join(tr, " ")), max(low, 0)
}

// ordersOf is the orders a side made in its measured turns (its 201 answers).
func ordersOf(r result) int64 { return r.statuses[201] }

// redisCPUPerOrder is Redis's CPU time over a side's measured turns per order it made.
func redisCPUPerOrder(r result) time.Duration {
	if n := ordersOf(r); n > 0 {
		return r.redis.cpu / time.Duration(n)
	}
	return 0
}

// redisRows are Redis's CPU time and memory per order made, the api's beside the minimal
// service's (and the bare EVALSHA server's), all on the bench's private redis-server.
func redisRows(res result, minimal, evalsha *result) []row {
	var bs []string
	for _, n := range []struct {
		r    *result
		name string
	}{{minimal, "minimal service"}, {evalsha, "bare Gin + EVALSHA"}} {
		if n.r != nil {
			bs = append(bs, n.name+": "+usCell(redisCPUPerOrder(*n.r)))
		}
	}
	ours := redisCPUPerOrder(res)
	cpu := row{name: redisCPURowName, text: usCell(ours), baseText: strings.Join(bs, "; "),
		targetText: fmt.Sprintf("≤ %.1f× the minimal's", redisCPUGoal),
		note: "INFO cpu (used_cpu_sys + used_cpu_user) of the bench's private redis-server over each side's measured turns, per order made (201 answer); " +
			"the api's per purchase by INFO commandstats (calls, then µs of wall time inside the command, which for evalsha includes the commands the script calls): " + res.redis.perOp(res.n, 10)}
	if minimal != nil && redisCPUPerOrder(*minimal) > 0 {
		x := float64(ours) / float64(redisCPUPerOrder(*minimal))
		cpu.ratioText = fmt.Sprintf("**%.2f×** the minimal's", x)
		cpu.targetText += " " + mark(x <= redisCPUGoal)
	}
	perOrder := func(r result) string {
		if n := ordersOf(r); n > 0 {
			return fmt.Sprintf("%.0f B", float64(r.redis.mem)/float64(n))
		}
		return "–"
	}
	mem := row{name: redisMemRowName, text: perOrder(res),
		targetText: fmt.Sprintf("≤ %d B", redisMemGoal),
		note:       fmt.Sprintf("INFO memory's used_memory of the private redis-server, its growth over each side's measured turns per order made: the api's %s bytes over %s orders", thousands(float64(res.redis.mem)), thousands(float64(ordersOf(res))))}
	if n := ordersOf(res); n > 0 {
		mem.targetText += " " + mark(float64(res.redis.mem)/float64(n) <= redisMemGoal)
	}
	if minimal != nil {
		mem.baseText = "minimal service: " + perOrder(*minimal)
	}
	return []row{cpu, mem}
}

func usCell(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

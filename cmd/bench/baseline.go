package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/redisconn"
)

// The baselines are the naive ceilings the api is measured against, each served by a child
// process of this binary (FLASHSALE_BENCH_SERVE selects which), so that each server, like the
// real api, has a process of its own beside the load generator.
const (
	serveEnv  = "FLASHSALE_BENCH_SERVE"
	addrEnv   = "FLASHSALE_BENCH_ADDR"
	prefixEnv = "FLASHSALE_BENCH_PREFIX"
)

// baselinePurchase is the bare purchase.lua (no call record, no re-sends: one EVALSHA per
// request) of the naive baseline server, declared here like every package declares its scripts.
var baselinePurchase = exactlyonce.Bare("lib/gcra.lua", "lib/changed.lua", "inventory/purchase.lua")

// serveBaseline runs the baseline named by FLASHSALE_BENCH_SERVE until killed.
func serveBaseline(mode string) error {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	switch mode {
	case "hello":
		// The bare ceiling: Gin answering a small JSON body.
		hello := func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"hello": "world"}) }
		r.GET("/hello", hello)
		// The same handler fed the sold-out row's exact request bytes (a POST with a bearer
		// JWT, Content-Type, Content-Length and a body): a second baseline in which net/http's
		// request parsing costs the same as in the api, so the ratio shows Gin-level work only.
		r.POST("/api/items/:id/purchase", hello)
		// And the waiting-room poll's bytes (a GET with a bearer JWT and a Queue-Ticket).
		r.GET("/api/items/:id/queue", hello)
		// A JSON body of n bytes, built once per n: beside a catalogue page of the same size,
		// it shows what the bytes on the wire cost a bare Gin server.
		var bodies sync.Map // n -> []byte
		r.GET("/bytes/:n", func(c *gin.Context) {
			n, err := strconv.Atoi(c.Param("n"))
			if err != nil || n < 12 || n > 1<<20 {
				c.Status(http.StatusBadRequest)
				return
			}
			b, ok := bodies.Load(n)
			if !ok {
				b, _ = bodies.LoadOrStore(n, []byte(`{"pad":"`+strings.Repeat("a", n-10)+`"}`))
			}
			c.Data(http.StatusOK, "application/json; charset=utf-8", b.([]byte))
		})
	case "evalsha":
		h, err := evalshaHandler()
		if err != nil {
			return err
		}
		r.POST("/purchase/:user", h)
	case "minimal":
		h, err := minimalHandler()
		if err != nil {
			return err
		}
		r.POST("/purchase/:user", h)
	case "replay":
		// The api's own replies, recorded once and written byte for byte (replay.go).
		if err := serveReplay(r); err != nil {
			return err
		}
	default:
		return fmt.Errorf("bench: unknown %s=%q", serveEnv, mode)
	}
	return http.ListenAndServe(os.Getenv(addrEnv), r)
}

// evalshaHandler is the one-EVALSHA-per-request purchase: the same purchase.lua and the same
// purchase rate limit the api applies, with the user from the path and no auth, coalescing,
// sold-out short cut or metrics.
func evalshaHandler() (gin.HandlerFunc, error) {
	ctx := context.Background()
	rdb, err := redisconn.Open(ctx, []string{redisAddr()}, 0)
	if err != nil {
		return nil, err
	}
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		return nil, err
	}
	lim, err := config.ParseLimit(purchaseLimit)
	if err != nil {
		return nil, err
	}
	k := keyspace.Space{Prefix: os.Getenv(prefixEnv)}.Item(benchItem)
	return func(c *gin.Context) {
		u := c.Param("user")
		res, err := baselinePurchase.Run(c.Request.Context(), rdb,
			[]string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders(), k.Idempotency(u, "")},
			600000, 86400000, lim.Rate, lim.Period.Milliseconds(), lim.Burst, benchItem, u, 1, "", "").Slice()
		if err != nil || len(res) != 5 { // the attempt's four values, then the batch's string (purchase.lua)
			c.JSON(http.StatusServiceUnavailable, gin.H{"error": fmt.Sprint(err)})
			return
		}
		c.JSON(http.StatusCreated, gin.H{"reply": res[0]})
	}, nil
}

func redisAddr() string {
	if a := os.Getenv("FLASHSALE_REDIS_ADDRS"); a != "" {
		return strings.Split(a, ",")[0]
	}
	return "127.0.0.1:6379"
}

func itoa(n int) string { return strconv.Itoa(n) }

// Package metrics owns flashsale's Prometheus registry and every metric the api and the
// reconciler export, as package variables so the code doing the work records them in one line;
// each process serves the registry on /metrics.
package metrics

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/redisconn"
)

// Registry holds every flashsale metric plus the Go runtime and process collectors. A
// dedicated registry (not the global default) keeps libraries from adding metrics unseen.
var Registry = prometheus.NewRegistry()

// Buckets. Purchases answer in about a millisecond on a healthy Redis, so the low end is fine
// grained; the top end catches the 5 s batch timeout and stalls.
var (
	latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	scriptBuckets  = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 5}
	batchBuckets   = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}
)

// HTTP (recorded by the api's Gin middleware).
var (
	HTTPRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashsale_http_requests_total",
		Help: "HTTP requests answered, by method, route pattern (e.g. /api/items/:id/purchase; \"unmatched\" for unknown paths) and status code.",
	}, []string{"method", "route", "status"})

	HTTPDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flashsale_http_request_duration_seconds",
		Help:    "Time from receiving an HTTP request to the end of its handler, by method and route pattern (not the long-lived catalogue stream, whose time is how long a shopper watched).",
		Buckets: latencyBuckets,
	}, []string{"method", "route"})

	PaymentWebhooks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashsale_payment_webhooks_total",
		Help: "Payment provider webhook deliveries by result: applied (verified, applied or deliberately ignored), unknown (verified, about a payment this api has no record of), refused (no valid signature: 400), retry (not applied yet: 503), mismatch (besides applied: a succeeded payment whose amount or currency was not its order's, refunded), or orphan_refunded (besides applied: a succeeded payment the api had no link to and whose metadata names no order it can pay, refunded).",
	}, []string{"result"})

	Purchases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashsale_purchases_total",
		Help: "Purchase attempts by outcome: reserved (201), replayed (200, same Idempotency-Key), the contract's error code (sold_out, limit_exceeded, rate_limited, ...), or client_gone.",
	}, []string{"outcome"})
)

// Redis scripts (recorded by the go-redis hook, see InstrumentRedis).
var (
	ScriptCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashsale_redis_script_calls_total",
		Help: "Lua script calls (EVALSHA/EVAL) by script name and result: ok, noscript (EVALSHA missed the script cache; the client retries with EVAL), error (the script or Redis replied an error) or unavailable (no reply: timeout, connection).",
	}, []string{"script", "result"})

	ScriptResends = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashsale_redis_script_resends_total",
		Help: "Script calls re-sent (or given up as outcome unknown) after a send got no reply: a stalling or flapping Redis. Re-sends are safe: each call runs once (lua/lib/once.lua).",
	}, func() float64 { return float64(exactlyonce.Resends()) })

	RedisFailovers = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashsale_redis_failovers_total",
		Help: "Changes of the Redis primary this process saw (a Sentinel promotion, a cluster master replaced by its replica); each is also logged once.",
	}, func() float64 { return float64(redisconn.Failovers()) })

	RedisRefusals = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashsale_redis_refusal_periods_total",
		Help: "Periods in which every change was refused before it ran (503, nothing was changed): the Redis primary not confirmed by a majority of the Sentinels within FLASHSALE_REDIS_SENTINEL_LEASE or another node named, or a replica that could be promoted not connected. Each is logged once as it begins and once as it ends, with its length.",
	}, func() float64 { return float64(redisconn.RefusalPeriods()) })

	ScriptDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flashsale_redis_script_duration_seconds",
		Help:    "Round trip of a Lua script call by script name, as the client sees it (for a pipeline: the whole pipeline, once per script in it).",
		Buckets: scriptBuckets,
	}, []string{"script"})
)

// Outbox relay (api process): Redis outbox streams -> Kafka.
var (
	OutboxBacklog = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flashsale_outbox_backlog_entries",
		Help: "Events in a Redis outbox stream not yet published to Kafka and acknowledged, by shard (\"s<n>\"; \"rank\" is the ratings stream). Grows while Kafka is down.",
	}, []string{"shard"})

	RelayPublished = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flashsale_relay_published_events_total",
		Help: "Outbox events the relay published to Kafka and had acknowledged (acks=all); rate() of it is the publish rate.",
	})

	RelayErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flashsale_relay_publish_errors_total",
		Help: "Failed Kafka publish attempts by the relay; the events stay in the outbox and are retried.",
	})
)

// Consumer and reconciler (reconciler process): Kafka -> PostgreSQL.
var (
	ConsumerLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "flashsale_consumer_lag_messages",
		Help: "Messages on the event topic not yet consumed by the reconciler's consumer group (sum over its partitions).",
	})

	RecordConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flashsale_record_conflicts_total",
		Help: "Order events parked in dead_letters because their order id already names an order with other content (a Redis failover that lost an order, whose id was then reused): never merged.",
	})

	ConsumerEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashsale_consumer_events_total",
		Help: "Events the reconciler consumed, by result: applied, duplicate (event_id already processed) or invalid (parked as poison).",
	}, []string{"result"})

	ReconcilerBatchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flashsale_reconciler_batch_events",
		Help:    "Events written to PostgreSQL per committed transaction.",
		Buckets: batchBuckets,
	})

	ReconcilerCommitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flashsale_reconciler_commit_duration_seconds",
		Help:    "Time to write and commit one batch transaction in PostgreSQL.",
		Buckets: latencyBuckets,
	})
)

// OrdersPruned (reconciler process) counts the final orders the pruning passes removed from Redis
// after FLASHSALE_ORDER_RETENTION (reconcile.PrunedTotal, handed over with From).
var OrdersPruned = newFuncCounter("flashsale_orders_pruned_total",
	"Final orders the reconciler's pruning passes removed from Redis after FLASHSALE_ORDER_RETENTION (Postgres alone keeps them since).")

// RedisDataLost is 1 while this process sees that Redis lost its data (internal/datamark: a
// data marker gone, older than seen, or replaced) and changes are refused until `reconciler
// restore --all` has run. Both processes have it; each hands its observer over with From.
var RedisDataLost = newFlagGauge("flashsale_redis_data_lost",
	"1 while Redis lost its data (came back empty or from an older copy) and changes answer 503 until `reconciler restore --all` has run; else 0.")

// FlagGauge is 1 while any of its sources reports true.
type FlagGauge struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	fns  []func() bool
}

func newFlagGauge(name, help string) *FlagGauge {
	return &FlagGauge{desc: prometheus.NewDesc(name, help, nil, nil)}
}

// From adds a source.
func (g *FlagGauge) From(fn func() bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fns = append(g.fns, fn)
}

// Describe implements prometheus.Collector.
func (g *FlagGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *FlagGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	v := 0.0
	for _, fn := range g.fns {
		if fn() {
			v = 1
		}
	}
	g.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
}

// ExpirerDrained (api process) counts the reservations the expirer expired. The expirer keeps
// its own count (orders.Expirer.Drained), handed over with From: orders needs no Prometheus.
var ExpirerDrained = newFuncCounter("flashsale_expirer_expired_orders_total",
	"Reservations the expirer moved to expired (their stock returned).")

// Waiting room (api process): polls answered from memory (the ticket's token) or from Redis,
// counted by internal/queue and handed over with From.
var (
	QueuePollsMemory = newFuncCounter("flashsale_queue_polls_memory_total",
		"Waiting-room polls answered from the api's memory (no Redis call).")
	QueuePollsRedis = newFuncCounter("flashsale_queue_polls_redis_total",
		"Waiting-room polls that read the ticket from Redis.")
)

// HTTPConns (api process) reports the connections the HTTP listeners hold, and those closed at
// once over a cap (app.CappedListener, handed over with From).
var HTTPConns = &connCollector{
	open: prometheus.NewDesc("flashsale_http_connections", "HTTP connections held now.", nil, nil),
	refused: prometheus.NewDesc("flashsale_http_connections_refused_total",
		"HTTP connections closed at once over a cap: total (the reserve included) or per_client.", []string{"cap"}, nil),
}

type connCollector struct {
	open, refused *prometheus.Desc
	mu            sync.Mutex
	fns           []func() (open int, refusedTotal, refusedPerClient int64)
}

// From adds a listener's counts.
func (c *connCollector) From(fn func() (open int, refusedTotal, refusedPerClient int64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, fn)
}

// Describe implements prometheus.Collector.
func (c *connCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.open; ch <- c.refused }

// Collect implements prometheus.Collector.
func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	var open int
	var total, perClient int64
	for _, fn := range c.fns {
		o, t, p := fn()
		open, total, perClient = open+o, total+t, perClient+p
	}
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(open))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(total), "total")
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(perClient), "per_client")
}

// Answers from the api's memory that would otherwise cost Redis (counted by internal/limits
// and internal/inventory, handed over with From).
var (
	RefusalsFromMemory = newFuncCounter("flashsale_rate_limit_refusals_memory_total",
		"Requests refused 429 from the api's memory of an earlier refusal (no Redis call).")
	UnknownFromMemory = newFuncCounter("flashsale_unknown_items_memory_total",
		"Item ids answered unknown from the api's short negative cache (no Redis call).")
)

// PaymentSimEvicted counts what the embedded payment simulator evicted to stay within
// FLASHSALE_PAYMENT_SIM_MAX_OBJECTS (finished payments with their charges and refunds, ended
// sessions, stored idempotent replies); zero in a process that runs none.
var PaymentSimEvicted = newFuncCounter("flashsale_payment_sim_evicted_total",
	"Objects the payment simulator this api started evicted to stay within FLASHSALE_PAYMENT_SIM_MAX_OBJECTS (finished payments with their charges and refunds, ended sessions, stored idempotent replies); 0 when it uses another's or none.")

// FuncCounter is a counter read at scrape time from counts that components keep themselves;
// several sources (e.g. expirers) add up.
type FuncCounter struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	fns  []func() int64
}

func newFuncCounter(name, help string) *FuncCounter {
	return &FuncCounter{desc: prometheus.NewDesc(name, help, nil, nil)}
}

// From adds a source; its value must only grow.
func (c *FuncCounter) From(fn func() int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, fn)
}

// Describe implements prometheus.Collector.
func (c *FuncCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *FuncCounter) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	var sum int64
	for _, fn := range c.fns {
		sum += fn()
	}
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(sum))
}

func init() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		HTTPRequests, HTTPDuration, Purchases, PaymentWebhooks,
		ScriptCalls, ScriptResends, ScriptDuration, RedisFailovers, RedisRefusals,
		OutboxBacklog, RelayPublished, RelayErrors,
		ExpirerDrained, QueuePollsMemory, QueuePollsRedis, HTTPConns, RedisDataLost,
		RefusalsFromMemory, UnknownFromMemory, PaymentSimEvicted,
	)
}

var reconcilerOnce sync.Once

// RegisterReconciler adds the consumer's and the reconciler's metrics to Registry. Only the
// reconciler process calls it: in the api they would always read zero and suggest otherwise.
func RegisterReconciler() {
	reconcilerOnce.Do(func() {
		Registry.MustRegister(ConsumerLag, ConsumerEvents, RecordConflicts, ReconcilerBatchSize, ReconcilerCommitDuration,
			OrdersPruned)
	})
}

// Handler serves Registry in the Prometheus text (or OpenMetrics) format.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{Registry: Registry})
}

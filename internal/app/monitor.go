package app

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/kafkaconn"
)

// maxMonitoredItems bounds the stock series the monitor keeps per second.
const maxMonitoredItems = 50

// stockGauge is the stock left of every item on sale (live or sold out), from the snapshot.
func (a *API) stockGauge(ctx context.Context) (map[string]int64, bool) {
	items, err := a.Inventory.List(ctx)
	if err != nil {
		return nil, false
	}
	out := map[string]int64{}
	for _, it := range items {
		if it.Status != inventory.StatusLive && it.Status != inventory.StatusSoldOut {
			continue
		}
		if len(out) == maxMonitoredItems {
			break
		}
		out["stock:"+it.ID] = it.StockLeft
	}
	return out, true
}

// lagGauge asks Kafka for the reconciler's lag (kafkaconn.Lag, the definition Prometheus
// uses too) every few seconds (three small requests, so not every second) and hands the last
// answer to the monitor.
type lagGauge struct {
	client *kafka.Client
	topic  string
	lag    atomic.Int64
	known  atomic.Bool
}

func (g *lagGauge) run(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		lag, err := kafkaconn.Lag(qctx, g.client, g.topic, kafkaconn.ConsumerGroup)
		cancel()
		if err != nil || lag < 0 {
			g.known.Store(false)
			if ctx.Err() == nil {
				slog.Debug("monitor: consumer lag unknown", "err", err)
			}
		} else {
			g.lag.Store(lag)
			g.known.Store(true)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *lagGauge) gauge(context.Context) (map[string]int64, bool) {
	if !g.known.Load() {
		return nil, false
	}
	return map[string]int64{"lag": g.lag.Load()}, true
}

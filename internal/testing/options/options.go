// Package options gives tests a package's options at the binaries' defaults: the zero
// settings of what a test passes take config.Defaults, so no test restates a default.
package options

import (
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/queue"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/reconcile"
)

// Inventory fills o's zero settings (a zero PurchaseLinger takes the default too).
func Inventory(o inventory.Options) inventory.Options {
	d := config.Defaults()
	fill(&o.ReservationTTL, d.ReservationTTL)
	fill(&o.IdempotencyTTL, d.IdempotencyTTL)
	fill(&o.SnapshotInterval, d.SnapshotInterval)
	fill(&o.PurchaseBatch, d.PurchaseBatch)
	fill(&o.PurchaseInFlight, d.PurchaseInFlight)
	fill(&o.PurchaseLinger, d.PurchaseLinger)
	return o
}

// Ranking fills o's zero Size and PriorMean; a zero PriorWeight stays (the plain mean).
func Ranking(o ranking.Options) ranking.Options {
	d := config.Defaults()
	fill(&o.Size, d.LeaderboardSize)
	fill(&o.PriorMean, d.RatingPriorMean)
	return o
}

// Reconcile fills o's zero reservation, idempotency and retention windows.
func Reconcile(o reconcile.Options) reconcile.Options {
	d := config.Defaults()
	fill(&o.ReservationTTL, d.ReservationTTL)
	fill(&o.IdempotencyTTL, d.IdempotencyTTL)
	fill(&o.Retention, d.OrderRetention)
	return o
}

// Queue fills o's zero Tick.
func Queue(o queue.Options) queue.Options {
	fill(&o.Tick, config.Defaults().QueueTick)
	return o
}

func fill[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

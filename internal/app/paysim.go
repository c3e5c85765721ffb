package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/paysim"
)

// startSimulator makes sure a payment simulator answers on FLASHSALE_PAYMENT_SIM_ADDR and
// returns its base URL. One already there is shared (this api must then be given its key and
// webhook secret); else one starts in this process with this api's key, secret and webhook
// route, and Close closes it.
func (a *API) startSimulator(ctx context.Context, cfg config.Config) (string, error) {
	p := cfg.Payment
	shared := func() (string, error) {
		if p.SimKeyGenerated || p.SecretGenerated {
			return "", fmt.Errorf("%w: a payment simulator already answers on FLASHSALE_PAYMENT_SIM_ADDR %s: set FLASHSALE_PAYMENT_SIM_API_KEY and FLASHSALE_PAYMENT_WEBHOOK_SECRET to its key and secret to use it", config.ErrInvalid, p.SimAddr)
		}
		slog.Info("payment simulator: using the one already answering", "url", "http://"+p.SimAddr)
		return "http://" + p.SimAddr, nil
	}
	if paysim.Answering(ctx, p.SimAddr) {
		return shared()
	}
	sim := paysim.New(paysim.Config{
		APIKey:         p.SimAPIKey,
		WebhookURL:     cfg.WebhookURL(),
		WebhookSecrets: p.WebhookSecrets[:1],
		AsyncDelay:     p.SimAsyncDelay,
		Public:         p.SimPublic,
		MaxObjects:     p.SimMaxObjects,
		Logger:         slog.Default(),
	})
	if err := sim.Start(p.SimAddr); err != nil {
		sim.Close()
		if errors.Is(err, paysim.ErrAddrInUse) && paysim.Answering(ctx, p.SimAddr) {
			return shared() // another api started one at the same moment
		}
		return "", fmt.Errorf("payment simulator: FLASHSALE_PAYMENT_SIM_ADDR %s: %w", p.SimAddr, err)
	}
	a.closers = append(a.closers, func() { sim.Close() })
	metrics.PaymentSimEvicted.From(func() int64 { return sim.Stats().Evicted })
	slog.Info("payment simulator started", "url", sim.URL(), "webhooks_to", cfg.WebhookURL())
	return sim.URL(), nil
}

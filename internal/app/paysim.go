package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/paysim"
)

// startSimulator makes sure a payment simulator answers on FLASHSALE_PAYMENT_SIM_ADDR and
// returns its base URL: one already answering there is used (several apis on a host share
// one; it must then sign with this api's FLASHSALE_PAYMENT_WEBHOOK_SECRET), else one is
// started in this process, signing with this api's secret and delivering to its webhook
// route, and closed by Close.
func (a *API) startSimulator(ctx context.Context, cfg config.Config) (string, error) {
	p := cfg.Payment
	if paysim.Answering(ctx, p.SimAddr) {
		if p.SecretGenerated {
			slog.Warn("payment simulator: using the one already answering; its webhooks will fail verification unless FLASHSALE_PAYMENT_WEBHOOK_SECRET is set to its secret", "addr", p.SimAddr)
		}
		slog.Info("payment simulator: using the one already answering", "url", "http://"+p.SimAddr)
		return "http://" + p.SimAddr, nil
	}
	sim := paysim.New(paysim.Config{
		WebhookURL:     cfg.WebhookURL(),
		WebhookSecrets: p.WebhookSecrets[:1],
		AsyncDelay:     p.SimAsyncDelay,
		Logger:         slog.Default(),
	})
	if err := sim.Start(p.SimAddr); err != nil {
		sim.Close()
		if errors.Is(err, paysim.ErrAddrInUse) && paysim.Answering(ctx, p.SimAddr) {
			return "http://" + p.SimAddr, nil // another api started one at the same moment
		}
		return "", fmt.Errorf("payment simulator: FLASHSALE_PAYMENT_SIM_ADDR %s: %w", p.SimAddr, err)
	}
	a.closers = append(a.closers, func() { sim.Close() })
	slog.Info("payment simulator started", "url", sim.URL(), "webhooks_to", cfg.WebhookURL())
	return sim.URL(), nil
}

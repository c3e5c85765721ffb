package app

import (
	"context"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/payment"
)

// newPayments builds the payment service of FLASHSALE_PAYMENT_PROVIDER: Stripe, the simulator
// (started here unless one already answers on its address), or none.
func (a *API) newPayments(ctx context.Context, cfg config.Config) (*payment.Service, error) {
	p := cfg.Payment
	var provider payment.Provider
	switch p.Provider {
	case payment.ProviderStripe:
		provider = payment.NewStripe(payment.StripeOptions{
			Name: payment.ProviderStripe, APIBase: p.StripeAPIBase, SecretKey: p.StripeSecretKey,
			Secrets: p.WebhookSecrets,
		})
	case payment.ProviderSim:
		base, err := a.startSimulator(ctx, cfg)
		if err != nil {
			return nil, err
		}
		provider = payment.NewStripe(payment.StripeOptions{
			Name: payment.ProviderSim, APIBase: base, SecretKey: p.SimAPIKey, Secrets: p.WebhookSecrets,
		})
	}
	svc := payment.NewService(provider, a.Orders, p.Currency)
	svc.Hold = p.ProcessingHold
	if provider != nil {
		a.Orders.PaymentHold = p.ProcessingHold
	}
	svc.ItemName = func(ctx context.Context, id string) string {
		it, err := a.Inventory.Lookup(ctx, id)
		if err != nil {
			return ""
		}
		return it.Name
	}
	return svc, nil
}

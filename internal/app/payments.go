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
	switch p.Provider {
	case payment.ProviderStripe:
		return payment.NewService(payment.NewStripe(payment.StripeOptions{
			Name: payment.ProviderStripe, APIBase: p.StripeAPIBase, SecretKey: p.StripeSecretKey,
			Secrets: p.WebhookSecrets,
		}), a.Orders, p.Currency), nil
	case payment.ProviderSim:
		base, err := a.startSimulator(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return payment.NewService(payment.NewStripe(payment.StripeOptions{
			Name: payment.ProviderSim, APIBase: base, SecretKey: p.SimAPIKey,
			Secrets: p.WebhookSecrets, CheckoutURL: base,
		}), a.Orders, p.Currency), nil
	}
	return payment.NewService(nil, a.Orders, p.Currency), nil
}

package app

import (
	"context"

	"github.com/flashsale/flashsale/internal/config"
)

// startSimulator returns the payment simulator's base URL. (Until internal/paysim lands, it
// expects one already running on FLASHSALE_PAYMENT_SIM_ADDR.)
func (a *API) startSimulator(_ context.Context, cfg config.Config) (string, error) {
	return "http://" + cfg.Payment.SimAddr, nil
}

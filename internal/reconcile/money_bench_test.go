package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/flashsale/flashsale/internal/paysim"
)

// BenchmarkMoneyReconciliation is the batch's money check at 100,000 succeeded payments in
// the simulator, each the paid order of the record: listed in pages of 100 over HTTP, known
// as the shop's by their attempts and judged against Postgres 500 a query. One op is one
// whole check.
func BenchmarkMoneyReconciliation(b *testing.B) {
	const n = 100_000
	m := newMoneyEnv(b, 3*n)
	ids := make([]string, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				ids[i] = m.pay(moneyKey, fmt.Sprintf("B.%d", i), 1000, paysim.CardVisa)
			}
		})
	}
	wg.Wait()
	orders := make([]string, n)
	for i := range orders {
		orders[i] = fmt.Sprintf("B.%d", i)
	}
	ctx := context.Background()
	if _, err := m.db.Exec(ctx, `INSERT INTO orders (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at)
		SELECT o, 'B', 'u', 1, 1000, 'paid', now(), now() FROM unnest($1::text[]) AS o`, orders); err != nil {
		b.Fatal(err)
	}
	if _, err := m.db.Exec(ctx, `INSERT INTO payments (id, order_id, provider, amount_cents, status, created_at, updated_at, attempt)
		SELECT p, o, 'sim', 1000, 'succeeded', now(), now(), 'fsa_' || replace(o, '.', '_')
		FROM unnest($1::text[], $2::text[]) AS x(p, o)`, ids, orders); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		c, err := m.r.CheckMoney(ctx, false)
		if err != nil || c.Skipped != "" || c.Listed != n || len(c.Drift) != 0 {
			b.Fatalf("check: %v listed %d drift %d %s", err, c.Listed, len(c.Drift), c.Skipped)
		}
	}
	b.ReportMetric(float64(n), "payments/op")
}

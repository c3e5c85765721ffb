package record

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// SalesFilter selects the items of a post-sale report: those whose sale window (starts_at, or
// the item's creation, to ends_at, or open) meets [From, To], or the one item named.
type SalesFilter struct {
	From, To *time.Time
	Item     string
}

// SalesReport is the post-sale report: one entry per item, by id.
type SalesReport struct {
	Items []ItemSales `json:"items"`
}

// ItemSales is how one item's sale went, as the record holds it.
type ItemSales struct {
	ItemID     string     `json:"item_id"`
	Name       string     `json:"name"`
	StartsAt   time.Time  `json:"starts_at"`
	EndsAt     *time.Time `json:"ends_at"`
	StockTotal int64      `json:"stock_total"`
	// SoldUnits: units of orders paid (or, once paid, refunded).
	SoldUnits int64 `json:"sold_units"`
	// SellOutSeconds runs from the start to the reservation after which no unit was free
	// again; nil while (or if, at the end) units were free.
	SellOutSeconds *float64 `json:"sell_out_seconds"`
	// RevenueCents is gross: the value of the orders SoldUnits counts, refunds apart.
	RevenueCents  int64 `json:"revenue_cents"`
	RefundedCents int64 `json:"refunded_cents"`
	Funnel        struct {
		Joined    int64 `json:"joined"`   // shoppers who joined the waiting room
		Admitted  int64 `json:"admitted"` // shoppers it admitted
		Reserved  int64 `json:"reserved"` // orders (every order starts reserved)
		Paid      int64 `json:"paid"`
		Expired   int64 `json:"expired"`
		Cancelled int64 `json:"cancelled"`
		Refunded  int64 `json:"refunded"`
	} `json:"funnel"`
	Refused struct {
		SoldOut        int64 `json:"sold_out"`
		LimitExceeded  int64 `json:"limit_exceeded"`
		RateLimited    int64 `json:"rate_limited"`
		SaleNotStarted int64 `json:"sale_not_started"`
		SaleEnded      int64 `json:"sale_ended"`
		QueueRequired  int64 `json:"queue_required"`
	} `json:"refused"`
	PeakPurchasesPerSecond int64 `json:"peak_purchases_per_second"`
	// WaitSeconds: from joining the waiting room (or the start, if later) to admission.
	WaitSeconds struct {
		P50 *float64 `json:"p50"`
		P99 *float64 `json:"p99"`
	} `json:"wait_seconds"`
	Fairness struct {
		// FIFOInversions counts pairs of admitted shoppers where the one who joined later
		// (both counted as joining at the start when they joined before it) was admitted
		// first: 0 is a fair line.
		FIFOInversions int64 `json:"fifo_inversions"`
	} `json:"fairness"`
}

// salesItems selects the filter's items with their start and end. $1 item ("" for all), $2
// from, $3 to.
const salesItems = `
	SELECT id, name, stock_total, COALESCE(starts_at, created_at) AS start_at, ends_at,
		LEAST(COALESCE(ends_at, 'infinity'), now()) AS end_at
	FROM items i
	WHERE ($1::text = '' OR id = $1)
		AND ($2::timestamptz IS NULL OR COALESCE(ends_at, 'infinity') >= $2)
		AND ($3::timestamptz IS NULL OR COALESCE(starts_at, created_at) <= $3)`

// salesReport computes every figure but fairness, one row per item, reading orders once (per
// item and second: the funnel, money and the peak second together). Sell-out walks the item's
// stock movements back from the end only when no unit was free then (docs/design.md, "Sell-out
// in the post-sale report"). Refunds: payments refunded, in full or in part, of paid orders.
const salesReport = `
WITH it AS (` + salesItems + `),
per_second AS (
	SELECT o.item_id, count(*) AS n,
		count(*) FILTER (WHERE o.status IN ('paid', 'refunded')) AS paid,
		count(*) FILTER (WHERE o.status = 'expired') AS expired,
		count(*) FILTER (WHERE o.status = 'cancelled') AS cancelled,
		count(*) FILTER (WHERE o.status = 'refunded') AS refunded,
		COALESCE(sum(o.quantity) FILTER (WHERE o.status IN ('paid', 'refunded')), 0) AS sold_units,
		COALESCE(sum(o.quantity * o.price_cents) FILTER (WHERE o.status IN ('paid', 'refunded')), 0) AS revenue,
		COALESCE(sum(o.quantity) FILTER (WHERE o.status IN ('reserved', 'paid', 'refunded')
			OR (o.status IN ('expired', 'cancelled') AND o.updated_at > it.end_at)), 0) AS held
	FROM orders o JOIN it ON it.id = o.item_id
	GROUP BY o.item_id, date_trunc('second', o.created_at)
),
o AS (
	SELECT item_id, sum(n) AS reserved, max(n) AS peak, sum(paid) AS paid, sum(expired) AS expired,
		sum(cancelled) AS cancelled, sum(refunded) AS refunded, sum(sold_units) AS sold_units,
		sum(revenue) AS revenue, sum(held) AS held
	FROM per_second GROUP BY item_id
),
sellout AS (
	SELECT it.id AS item_id, w.at
	FROM it JOIN o ON o.item_id = it.id
	CROSS JOIN LATERAL (
		SELECT at FROM (
			SELECT s.at, it.stock_total - o.held - sum(s.delta) OVER (ORDER BY s.at DESC) AS free_before
			FROM stock_movements s WHERE s.item_id = it.id AND s.at <= it.end_at
			ORDER BY s.at DESC) m
		WHERE free_before > 0
		LIMIT 1) w
	WHERE it.stock_total - o.held <= 0
),
refunds AS (
	SELECT o.item_id, count(DISTINCT o.id) FILTER (WHERE o.status = 'paid') AS refunded,
		sum(p.refunded_cents) AS refunded_cents
	FROM payments p JOIN orders o ON o.id = p.order_id JOIN it ON it.id = o.item_id
	WHERE p.refunded_cents > 0 AND o.status IN ('paid', 'refunded')
	GROUP BY o.item_id
),
tally AS (
	SELECT t.item_id, sum(sold_out) AS sold_out, sum(limit_exceeded) AS limit_exceeded,
		sum(rate_limited) AS rate_limited, sum(sale_not_started) AS sale_not_started,
		sum(sale_ended) AS sale_ended, sum(queue_required) AS queue_required
	FROM sale_tallies t JOIN it ON it.id = t.item_id
	GROUP BY t.item_id
),
q AS (
	SELECT q.item_id, count(q.joined_at) AS joined, count(q.admitted_at) AS admitted,
		percentile_cont(0.5) WITHIN GROUP (ORDER BY w) AS p50,
		percentile_cont(0.99) WITHIN GROUP (ORDER BY w) AS p99
	FROM (SELECT q.*, extract(epoch FROM q.admitted_at - GREATEST(q.joined_at, it.start_at))::float8 AS w
		FROM queue_entries q JOIN it ON it.id = q.item_id) q
	GROUP BY q.item_id
)
SELECT it.id, it.name, it.start_at, it.ends_at, it.stock_total,
	COALESCE(o.sold_units, 0), extract(epoch FROM sellout.at - it.start_at)::float8,
	COALESCE(o.revenue, 0), COALESCE(refunds.refunded_cents, 0),
	COALESCE(q.joined, 0), COALESCE(q.admitted, 0), COALESCE(o.reserved, 0), COALESCE(o.paid, 0),
	COALESCE(o.expired, 0), COALESCE(o.cancelled, 0), COALESCE(o.refunded, 0) + COALESCE(refunds.refunded, 0),
	COALESCE(tally.sold_out, 0), COALESCE(tally.limit_exceeded, 0), COALESCE(tally.rate_limited, 0),
	COALESCE(tally.sale_not_started, 0), COALESCE(tally.sale_ended, 0), COALESCE(tally.queue_required, 0),
	COALESCE(o.peak, 0), q.p50, q.p99
FROM it
LEFT JOIN o ON o.item_id = it.id
LEFT JOIN refunds ON refunds.item_id = it.id
LEFT JOIN tally ON tally.item_id = it.id
LEFT JOIN q ON q.item_id = it.id
LEFT JOIN sellout ON sellout.item_id = it.id
ORDER BY it.id`

// salesAdmissions lists each item's admitted shoppers in join order (a join before the start
// counts as joining at the start), then by admission.
const salesAdmissions = `
WITH it AS (` + salesItems + `)
SELECT q.item_id, q.admitted_at
FROM queue_entries q JOIN it ON it.id = q.item_id
WHERE q.admitted_at IS NOT NULL AND q.joined_at IS NOT NULL
ORDER BY q.item_id, GREATEST(q.joined_at, it.start_at), q.admitted_at`

// SalesReport computes the post-sale report from the record, in one read-only transaction (so
// its figures agree with each other) without JIT (the query's cost estimate crosses Postgres's
// JIT thresholds, and compiling it takes far longer than running it) and with room to sort
// and hash in memory.
func (q *Queries) SalesReport(ctx context.Context, f SalesFilter) (SalesReport, error) {
	tx, err := q.db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return SalesReport{}, fmt.Errorf("record: sales report: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL jit = off; SET LOCAL work_mem = '64MB'"); err != nil {
		return SalesReport{}, fmt.Errorf("record: sales report: %w", err)
	}
	rows, err := tx.Query(ctx, salesReport, f.Item, f.From, f.To)
	if err != nil {
		return SalesReport{}, fmt.Errorf("record: sales report: %w", err)
	}
	rep := SalesReport{Items: []ItemSales{}}
	for rows.Next() {
		var s ItemSales
		err := rows.Scan(&s.ItemID, &s.Name, &s.StartsAt, &s.EndsAt, &s.StockTotal,
			&s.SoldUnits, &s.SellOutSeconds, &s.RevenueCents, &s.RefundedCents,
			&s.Funnel.Joined, &s.Funnel.Admitted, &s.Funnel.Reserved, &s.Funnel.Paid,
			&s.Funnel.Expired, &s.Funnel.Cancelled, &s.Funnel.Refunded,
			&s.Refused.SoldOut, &s.Refused.LimitExceeded, &s.Refused.RateLimited,
			&s.Refused.SaleNotStarted, &s.Refused.SaleEnded, &s.Refused.QueueRequired,
			&s.PeakPurchasesPerSecond, &s.WaitSeconds.P50, &s.WaitSeconds.P99)
		if err != nil {
			rows.Close()
			return SalesReport{}, fmt.Errorf("record: sales report: %w", err)
		}
		for _, f := range []*float64{s.SellOutSeconds, s.WaitSeconds.P50, s.WaitSeconds.P99} {
			if f != nil {
				*f = math.Round(*f*1000) / 1000 // to the millisecond the events carry
			}
		}
		s.StartsAt = s.StartsAt.UTC()
		if s.EndsAt != nil {
			t := s.EndsAt.UTC()
			s.EndsAt = &t
		}
		rep.Items = append(rep.Items, s)
	}
	if err := rows.Err(); err != nil {
		return SalesReport{}, fmt.Errorf("record: sales report: %w", err)
	}
	inversions, err := fifoInversions(ctx, tx, f)
	if err != nil {
		return SalesReport{}, err
	}
	for i := range rep.Items {
		rep.Items[i].Fairness.FIFOInversions = inversions[rep.Items[i].ItemID]
	}
	return rep, nil
}

// fifoInversions counts, per item, the pairs of admitted shoppers admitted against join order.
func fifoInversions(ctx context.Context, tx pgx.Tx, f SalesFilter) (map[string]int64, error) {
	rows, err := tx.Query(ctx, salesAdmissions, f.Item, f.From, f.To)
	if err != nil {
		return nil, fmt.Errorf("record: sales report admissions: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	var item string
	var admitted []int64
	flush := func() {
		if len(admitted) > 0 {
			out[item] = Inversions(admitted)
		}
		admitted = admitted[:0]
	}
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, fmt.Errorf("record: sales report admissions: %w", err)
		}
		if id != item {
			flush()
			item = id
		}
		admitted = append(admitted, at.UnixMicro())
	}
	flush()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("record: sales report admissions: %w", err)
	}
	return out, nil
}

// Inversions counts the pairs i < j with a[i] > a[j] (a merge sort, so n log n); a is sorted
// on return.
func Inversions(a []int64) int64 {
	if len(a) < 2 {
		return 0
	}
	tmp := make([]int64, len(a))
	var count func(lo, hi int) int64
	count = func(lo, hi int) int64 {
		if hi-lo < 2 {
			return 0
		}
		mid := (lo + hi) / 2
		n := count(lo, mid) + count(mid, hi)
		i, j, k := lo, mid, lo
		for i < mid && j < hi {
			if a[j] < a[i] {
				n += int64(mid - i)
				tmp[k] = a[j]
				j++
			} else {
				tmp[k] = a[i]
				i++
			}
			k++
		}
		k += copy(tmp[k:], a[i:mid])
		copy(tmp[k:], a[j:hi])
		copy(a[lo:hi], tmp[lo:hi])
		return n
	}
	return count(0, len(a))
}

// SalesColumns are the report's CSV columns, the JSON's fields flattened.
var SalesColumns = []string{"item_id", "name", "starts_at", "ends_at", "stock_total", "sold_units",
	"sell_out_seconds", "revenue_cents", "refunded_cents",
	"funnel_joined", "funnel_admitted", "funnel_reserved", "funnel_paid", "funnel_expired",
	"funnel_cancelled", "funnel_refunded",
	"refused_sold_out", "refused_limit_exceeded", "refused_rate_limited", "refused_sale_not_started",
	"refused_sale_ended", "refused_queue_required",
	"peak_purchases_per_second", "wait_seconds_p50", "wait_seconds_p99", "fairness_fifo_inversions"}

// WriteCSV writes the report as CSV: a header row (SalesColumns), then one row per item; an
// unknown value (a sale that did not sell out, no waits) is an empty cell.
func (r SalesReport) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(SalesColumns); err != nil {
		return err
	}
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	opt := func(f *float64) string {
		if f == nil {
			return ""
		}
		return strconv.FormatFloat(*f, 'f', -1, 64)
	}
	items := append([]ItemSales(nil), r.Items...)
	sort.SliceStable(items, func(i, j int) bool { return items[i].ItemID < items[j].ItemID })
	for _, s := range items {
		ends := ""
		if s.EndsAt != nil {
			ends = s.EndsAt.Format(time.RFC3339)
		}
		row := []string{s.ItemID, csvText(s.Name), s.StartsAt.Format(time.RFC3339), ends, i64(s.StockTotal),
			i64(s.SoldUnits), opt(s.SellOutSeconds), i64(s.RevenueCents), i64(s.RefundedCents),
			i64(s.Funnel.Joined), i64(s.Funnel.Admitted), i64(s.Funnel.Reserved), i64(s.Funnel.Paid),
			i64(s.Funnel.Expired), i64(s.Funnel.Cancelled), i64(s.Funnel.Refunded),
			i64(s.Refused.SoldOut), i64(s.Refused.LimitExceeded), i64(s.Refused.RateLimited),
			i64(s.Refused.SaleNotStarted), i64(s.Refused.SaleEnded), i64(s.Refused.QueueRequired),
			i64(s.PeakPurchasesPerSecond), opt(s.WaitSeconds.P50), opt(s.WaitSeconds.P99),
			i64(s.Fairness.FIFOInversions)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// csvText keeps a name from being read as a formula by a spreadsheet (a leading =, +, - or @).
func csvText(s string) string {
	if s != "" && (s[0] == '=' || s[0] == '+' || s[0] == '-' || s[0] == '@') {
		return "'" + s
	}
	return s
}

package record

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// How a batch reaches Postgres. Profiled on cmd/bench's batches (1000 order.reserved events),
// the old form, one INSERT per table with the rows as one jsonb parameter, spent about half its
// time in Postgres parsing that jsonb (text to jsonb to typed columns), and INSERT ... ON
// CONFLICT costs about twice a plain insert per row for processed_events (speculative
// insertion). Temporary staging tables were tried and dropped: a commit after touching them
// truncates each (ON COMMIT DELETE ROWS) for ~20 ms a batch, more than they saved. So:
//
//   - writeNew, the common case (events arrive once, in stream order): inside a savepoint, COPY
//     the event ids straight into processed_events, the orders the batch creates straight into
//     orders and the stock movements straight into stock_movements. Any of them already there
//     (a re-delivery, an order whose later event was applied first) fails the COPY with a
//     unique violation and the savepoint is rolled back: nothing of it stays.
//   - writeMerged, the fallback: claim the event ids with INSERT ... ON CONFLICT DO NOTHING
//     RETURNING, and merge only the new events' rows.
//
// Rows that may update existing ones (items, ratings, orders the batch only pays, cancels or
// expires) always go through a merge: one INSERT ... SELECT FROM unnest(arrays) ... ON
// CONFLICT DO UPDATE per table, the arrays sent in binary, with the forward-only and
// newest-wins rules in SQL.

// write writes the valid events of a batch and returns those applied now (not before).
func write(ctx context.Context, pc *pgx.Conn, valid []parsed) ([]parsed, error) {
	if _, err := pc.Exec(ctx, "SAVEPOINT record_new"); err != nil {
		return nil, err
	}
	err := writeNew(ctx, pc, valid)
	if err == nil {
		_, err = pc.Exec(ctx, "RELEASE SAVEPOINT record_new")
		return valid, err
	}
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		return nil, err
	}
	if _, err := pc.Exec(ctx, "ROLLBACK TO SAVEPOINT record_new"); err != nil {
		return nil, err
	}
	return writeMerged(ctx, pc, valid)
}

// writeNew writes events none of which was applied before, and fails with a unique violation
// if one was.
func writeNew(ctx context.Context, pc *pgx.Conn, valid []parsed) error {
	// processed_at is the wall clock of the write, so processed_at minus the event's time is
	// its delay through the pipeline.
	now := time.Now()
	err := copyInto(ctx, pc, "processed_events", []string{"event_id", "type", "kafka_partition", "kafka_offset", "processed_at"},
		len(valid), func(i int) []any {
			p := valid[i]
			return []any{p.ev.EventID, p.ev.Type, p.msg.Partition, p.msg.Offset, now}
		})
	if err != nil {
		return err
	}
	rows := fold(valid)
	var created, changed []*orderRow
	for _, o := range rows.orders {
		if o.Reserved {
			created = append(created, o)
		} else {
			changed = append(changed, o)
		}
	}
	err = copyInto(ctx, pc, "orders", []string{"id", "item_id", "user_id", "quantity", "price_cents", "status", "created_at", "updated_at", "expires_at"},
		len(created), func(i int) []any {
			r := created[i]
			return []any{r.ID, r.ItemID, r.UserID, r.Quantity, r.PriceCents, r.Status, r.CreatedAt, r.UpdatedAt, r.ExpiresAt}
		})
	if err != nil {
		return err
	}
	err = copyInto(ctx, pc, "stock_movements", []string{"event_id", "item_id", "kind", "delta", "order_id", "stock_total", "at"},
		len(rows.moves), func(i int) []any {
			r := &rows.moves[i]
			return []any{r.EventID, r.ItemID, r.Kind, r.Delta, r.OrderID, r.StockTotal, r.At}
		})
	if err != nil {
		return err
	}
	rows.orders, rows.moves = changed, nil
	return merge(ctx, pc, rows)
}

// writeMerged claims the events in processed_events, then merges the rows of those not
// applied before, which it returns.
func writeMerged(ctx context.Context, pc *pgx.Conn, valid []parsed) ([]parsed, error) {
	n := len(valid)
	ids, types, parts, offsets := make([]string, n), make([]string, n), make([]int32, n), make([]int64, n)
	for i, p := range valid {
		ids[i], types[i], parts[i], offsets[i] = p.ev.EventID, p.ev.Type, int32(p.msg.Partition), p.msg.Offset
	}
	rows, err := pc.Query(ctx, claimEvents, ids, types, parts, offsets)
	if err != nil {
		return nil, fmt.Errorf("processed events: %w", err)
	}
	isNew := make(map[string]bool, n)
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { isNew[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("processed events: %w", err)
	}
	fresh := valid[:0:0]
	for _, p := range valid {
		if isNew[p.ev.EventID] {
			fresh = append(fresh, p)
		}
	}
	return fresh, merge(ctx, pc, fold(fresh))
}

// merge writes rows with one set-based statement per table (none for a table without rows).
func merge(ctx context.Context, pc *pgx.Conn, rows batchRows) error {
	if n := len(rows.items); n > 0 {
		var (
			ids, names, cats                   = make([]string, n), make([]string, n), make([]string, n)
			prices, stocks, limits             = make([]int64, n), make([]int64, n), make([]int64, n)
			starts, ends                       = make([]*time.Time, n), make([]*time.Time, n)
			attrMs, attrSeq, stockMs, stockSeq = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		)
		for i, r := range rows.items {
			ids[i], names[i], cats[i], prices[i], stocks[i], limits[i] = r.ID, r.Name, r.Category, r.PriceCents, r.StockTotal, r.PerUserLimit
			starts[i], ends[i] = r.StartsAt, r.EndsAt
			attrMs[i], attrSeq[i], stockMs[i], stockSeq[i] = r.AttrPosMs, r.AttrPosSeq, r.StockPosMs, r.StockPosSeq
		}
		if _, err := pc.Exec(ctx, mergeItems, ids, names, cats, prices, stocks, limits, starts, ends,
			attrMs, attrSeq, stockMs, stockSeq); err != nil {
			return fmt.Errorf("items: %w", err)
		}
	}
	if n := len(rows.orders); n > 0 {
		var (
			ids, items, users, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			qtys, prices                = make([]int64, n), make([]int64, n)
			created, updated            = make([]time.Time, n), make([]time.Time, n)
			expires                     = make([]*time.Time, n)
		)
		for i, r := range rows.orders {
			ids[i], items[i], users[i], statuses[i] = r.ID, r.ItemID, r.UserID, r.Status
			qtys[i], prices[i], created[i], updated[i] = r.Quantity, r.PriceCents, r.CreatedAt, r.UpdatedAt
			expires[i] = r.ExpiresAt
		}
		if _, err := pc.Exec(ctx, mergeOrders, ids, items, users, qtys, prices, statuses, created, updated, expires); err != nil {
			return fmt.Errorf("orders: %w", err)
		}
	}
	if n := len(rows.ratings); n > 0 {
		var (
			items, users   = make([]string, n), make([]string, n)
			stars, ms, seq = make([]int64, n), make([]int64, n), make([]int64, n)
			updated        = make([]time.Time, n)
		)
		for i, r := range rows.ratings {
			items[i], users[i], stars[i], ms[i], seq[i], updated[i] = r.ItemID, r.UserID, r.Stars, r.PosMs, r.PosSeq, r.UpdatedAt
		}
		if _, err := pc.Exec(ctx, mergeRatings, items, users, stars, ms, seq, updated); err != nil {
			return fmt.Errorf("ratings: %w", err)
		}
	}
	if n := len(rows.moves); n > 0 {
		var (
			ids, items, kinds = make([]string, n), make([]string, n), make([]string, n)
			deltas            = make([]int64, n)
			orders            = make([]*string, n)
			totals            = make([]*int64, n)
			at                = make([]time.Time, n)
		)
		for i, r := range rows.moves {
			ids[i], items[i], kinds[i], deltas[i], orders[i], totals[i], at[i] = r.EventID, r.ItemID, r.Kind, r.Delta, r.OrderID, r.StockTotal, r.At
		}
		if _, err := pc.Exec(ctx, mergeMovements, ids, items, kinds, deltas, orders, totals, at); err != nil {
			return fmt.Errorf("stock movements: %w", err)
		}
	}
	return nil
}

// copyInto COPYs n rows into table (nothing for none).
func copyInto(ctx context.Context, pc *pgx.Conn, table string, cols []string, n int, row func(i int) []any) error {
	if n == 0 {
		return nil
	}
	_, err := pc.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromSlice(n, func(i int) ([]any, error) {
		return row(i), nil
	}))
	if err != nil {
		return fmt.Errorf("copy into %s: %w", table, err)
	}
	return nil
}

// withPgx runs fn with the pgx connection under conn, a gorm session pinned to one pooled
// connection (gorm.DB.Connection): what fn sends runs in that session, so inside a
// transaction begun on it. database/sql holds the connection's lock while fn runs, so fn must
// not use gorm on the same connection.
func withPgx(conn *gorm.DB, fn func(pc *pgx.Conn) error) error {
	c, ok := conn.Statement.ConnPool.(*sql.Conn)
	if !ok {
		return fmt.Errorf("gorm session holds a %T, not a *sql.Conn", conn.Statement.ConnPool)
	}
	return c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("driver connection is a %T: open the database with pgx's stdlib driver", dc)
		}
		return fn(sc.Conn())
	})
}

// newer sets each column from the new row only when the new row's position is later.
func newer(table string, pos [2]string, cols ...string) string {
	cond := fmt.Sprintf("(excluded.%s, excluded.%s) > (%s.%s, %s.%s)", pos[0], pos[1], table, pos[0], table, pos[1])
	var b strings.Builder
	for i, c := range append(cols, pos[0], pos[1]) {
		if i > 0 {
			b.WriteString(",\n\t")
		}
		fmt.Fprintf(&b, "%s = CASE WHEN %s THEN excluded.%s ELSE %s.%s END", c, cond, c, table, c)
	}
	return b.String()
}

var (
	// claimEvents records events as processed and returns those not recorded before;
	// processed_at as in writeNew.
	claimEvents = `INSERT INTO processed_events (event_id, type, kafka_partition, kafka_offset, processed_at)
	SELECT event_id, type, kafka_partition, kafka_offset, clock_timestamp()
	FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[]) AS x(event_id, type, kafka_partition, kafka_offset)
	ON CONFLICT (event_id) DO NOTHING
	RETURNING event_id`

	mergeItems = `INSERT INTO items AS i (id, name, category, price_cents, stock_total, per_user_limit,
		starts_at, ends_at, attr_pos_ms, attr_pos_seq, stock_pos_ms, stock_pos_seq, updated_at)
	SELECT id, name, category, price_cents, stock_total, per_user_limit, starts_at, ends_at,
		attr_pos_ms, attr_pos_seq, stock_pos_ms, stock_pos_seq, now()
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[],
		$7::timestamptz[], $8::timestamptz[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[])
		AS x(id, name, category, price_cents, stock_total, per_user_limit, starts_at, ends_at,
		attr_pos_ms, attr_pos_seq, stock_pos_ms, stock_pos_seq)
	ON CONFLICT (id) DO UPDATE SET
	` + newer("i", [2]string{"attr_pos_ms", "attr_pos_seq"}, "name", "category", "price_cents", "per_user_limit", "starts_at", "ends_at") + `,
	` + newer("i", [2]string{"stock_pos_ms", "stock_pos_seq"}, "stock_total") + `,
	updated_at = now()`

	mergeOrders = `INSERT INTO orders AS o (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at, expires_at)
	SELECT id, item_id, user_id, quantity, price_cents, status, created_at, updated_at, expires_at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[],
		$7::timestamptz[], $8::timestamptz[], $9::timestamptz[])
		AS x(id, item_id, user_id, quantity, price_cents, status, created_at, updated_at, expires_at)
	ON CONFLICT (id) DO UPDATE SET
	expires_at = COALESCE(o.expires_at, excluded.expires_at),
	status = CASE WHEN order_status_rank(excluded.status) > order_status_rank(o.status) THEN excluded.status ELSE o.status END,
	created_at = LEAST(o.created_at, excluded.created_at),
	updated_at = GREATEST(o.updated_at, excluded.updated_at)`

	mergeRatings = `INSERT INTO ratings AS r (item_id, user_id, stars, pos_ms, pos_seq, updated_at)
	SELECT item_id, user_id, stars, pos_ms, pos_seq, updated_at
	FROM unnest($1::text[], $2::text[], $3::smallint[], $4::bigint[], $5::bigint[], $6::timestamptz[])
		AS x(item_id, user_id, stars, pos_ms, pos_seq, updated_at)
	ON CONFLICT (item_id, user_id) DO UPDATE SET
	` + newer("r", [2]string{"pos_ms", "pos_seq"}, "stars", "updated_at")

	mergeMovements = `INSERT INTO stock_movements (event_id, item_id, kind, delta, order_id, stock_total, at)
	SELECT event_id, item_id, kind, delta, order_id, stock_total, at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bigint[], $7::timestamptz[])
		AS x(event_id, item_id, kind, delta, order_id, stock_total, at)
	ON CONFLICT (event_id) DO NOTHING`
)

package record

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/flashsale/flashsale/internal/events"
)

// A batch is one pipelined transaction, one round trip (txBatch), not COPY, which cannot be
// pipelined. Rows that may update existing ones always merge (ON CONFLICT DO UPDATE, with the
// forward-only and newest-wins rules in SQL); the rest go in as plain INSERTs (writeNew), or,
// when one was there already, merged (writeMerged). Why: docs/design.md, "The record writer".

// write writes a batch in one transaction: its dead letters and its valid events. It returns
// the events applied now (not before), and the order events parked as conflicts with orders
// already recorded (conflict.go).
func write(ctx context.Context, pc *pgx.Conn, dead []DeadLetter, valid []parsed, provider string) ([]parsed, int, error) {
	merged := map[string]bool{}
	fresh, parked := valid, 0
	err := writeNew(ctx, pc, dead, valid, merged, provider)
	if err != nil {
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			return nil, 0, err
		}
		clear(merged)
		if fresh, parked, err = writeMerged(ctx, pc, dead, valid, merged, provider); err != nil {
			return nil, 0, err
		}
	}
	// An order update the merge's guard refused met another order under its id (one that
	// arrived since writeMerged looked, or in writeNew, which does not look): not merged; its
	// events are parked now, after the commit.
	fresh, late := refusedOrders(fresh, merged)
	if len(late) > 0 {
		b := newTxBatch(ctx, pc)
		queueDead(b, late)
		if err := b.send(); err != nil {
			slog.Error("reconciler: parking conflicting order events failed; they were not merged", "events", len(late), "err", err)
		}
		parked += len(late)
	}
	return fresh, parked, nil
}

// refusedOrders splits off the order events whose row mergeOrders was given but did not write
// (merged[id] false).
func refusedOrders(fresh []parsed, merged map[string]bool) ([]parsed, []DeadLetter) {
	refused := false
	for _, ok := range merged {
		refused = refused || !ok
	}
	if !refused {
		return fresh, nil
	}
	var dead []DeadLetter
	kept := fresh[:0:0]
	for _, p := range fresh {
		if ok, sent := merged[p.ev.OrderID]; sent && !ok && isOrderEvent(p.ev.Type) {
			dead = append(dead, conflictLetter(p))
			continue
		}
		kept = append(kept, p)
	}
	return kept, dead
}

// writeNew writes events none of which was applied before, and fails with a unique violation
// (the transaction rolled back) if one was. Plain INSERTs cost less per row than ON CONFLICT
// DO NOTHING (speculative insertion), so the rare re-delivery pays for a retry instead.
func writeNew(ctx context.Context, pc *pgx.Conn, dead []DeadLetter, valid []parsed, merged map[string]bool, provider string) error {
	b := newTxBatch(ctx, pc)
	b.plain("BEGIN")
	queueDead(b, dead)
	if n := len(valid); n > 0 {
		ids, types, parts, offsets := claimArrays(valid)
		// processed_at is the wall clock of the write, so processed_at minus the event's time
		// is its delay through the pipeline.
		b.exec(insertEvents, ids, types, parts, offsets, time.Now())
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
	queueOrders(b, insertOrders, created, nil)
	queueMovements(b, insertMovements, rows.moves)
	rows.orders, rows.moves = changed, nil
	queueMerge(b, rows, merged, provider)
	b.plain("COMMIT")
	return b.send()
}

// writeMerged claims the events in processed_events, parks those of them that contradict an
// order already recorded, then merges the rows of the others not applied before, which it
// returns with the count parked. (writeNew needs no such check: an order it inserts is new.)
func writeMerged(ctx context.Context, pc *pgx.Conn, dead []DeadLetter, valid []parsed, merged map[string]bool, provider string) ([]parsed, int, error) {
	isNew := make(map[string]bool, len(valid))
	b := newTxBatch(ctx, pc)
	b.plain("BEGIN")
	queueDead(b, dead)
	if len(valid) > 0 {
		ids, types, parts, offsets := claimArrays(valid)
		b.query(claimEvents, func(rr *pgconn.ResultReader) error {
			for rr.NextRow() {
				isNew[string(rr.Values()[0])] = true
			}
			return nil
		}, ids, types, parts, offsets)
	}
	if err := b.send(); err != nil {
		return nil, 0, fmt.Errorf("processed events: %w", err)
	}
	fresh := valid[:0:0]
	for _, p := range valid {
		if isNew[p.ev.EventID] {
			fresh = append(fresh, p)
		}
	}
	stored := map[string]storedOrder{}
	b = newTxBatch(ctx, pc)
	queueSelectOrders(b, fresh, stored)
	if err := b.send(); err != nil {
		return nil, 0, fmt.Errorf("stored orders: %w", err)
	}
	fresh, conflicts := conflictsStored(fresh, stored)
	b = newTxBatch(ctx, pc)
	queueDead(b, conflicts)
	queueMerge(b, fold(fresh), merged, provider)
	b.plain("COMMIT")
	return fresh, len(conflicts), b.send()
}

// claimArrays are the processed_events columns of the events, as arrays.
func claimArrays(valid []parsed) ([]string, []string, []int32, []int64) {
	n := len(valid)
	ids, types, parts, offsets := make([]string, n), make([]string, n), make([]int32, n), make([]int64, n)
	for i, p := range valid {
		ids[i], types[i], parts[i], offsets[i] = p.ev.EventID, p.ev.Type, int32(p.msg.Partition), p.msg.Offset
	}
	return ids, types, parts, offsets
}

// queueDead queues the batch's dead letters (parked once per topic, partition and offset).
func queueDead(b *txBatch, dead []DeadLetter) {
	n := len(dead)
	if n == 0 {
		return
	}
	var (
		topics, errs = make([]string, n), make([]string, n)
		parts        = make([]int32, n)
		offsets      = make([]int64, n)
		keys, values = make([][]byte, n), make([][]byte, n)
		at           = make([]time.Time, n)
	)
	for i, d := range dead {
		topics[i], parts[i], offsets[i], keys[i], values[i], errs[i], at[i] = d.Topic, int32(d.KafkaPartition), d.KafkaOffset, d.Key, d.Value, d.Error, d.ReceivedAt
	}
	b.exec(insertDead, topics, parts, offsets, keys, values, errs, at)
}

// queueOrders queues one statement (insertOrders or mergeOrders) for the order rows. With
// merged, the statement returns the ids it wrote (mergeOrders): each row's id is noted false,
// then true when written.
func queueOrders(b *txBatch, s stmt, rows []*orderRow, merged map[string]bool) {
	n := len(rows)
	if n == 0 {
		return
	}
	var (
		ids, items, users, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		qtys, prices                = make([]int64, n), make([]int64, n)
		created, updated            = make([]time.Time, n), make([]time.Time, n)
		expires                     = make([]*time.Time, n)
		restocked                   = make([]int64, n)
	)
	for i, r := range rows {
		ids[i], items[i], users[i], statuses[i] = r.ID, r.ItemID, r.UserID, r.Status
		qtys[i], prices[i], created[i], updated[i] = r.Quantity, r.PriceCents, r.CreatedAt, r.UpdatedAt
		expires[i], restocked[i] = r.ExpiresAt, r.Restocked
	}
	if merged == nil {
		b.exec(s, ids, items, users, qtys, prices, statuses, created, updated, expires, restocked)
		return
	}
	for _, id := range ids {
		merged[id] = false
	}
	b.query(s, func(rr *pgconn.ResultReader) error {
		for rr.NextRow() {
			merged[string(rr.Values()[0])] = true
		}
		return nil
	}, ids, items, users, qtys, prices, statuses, created, updated, expires, restocked)
}

// queueMovements queues one statement (insertMovements or mergeMovements) for the movements.
func queueMovements(b *txBatch, s stmt, rows []movementRow) {
	n := len(rows)
	if n == 0 {
		return
	}
	var (
		ids, items, kinds = make([]string, n), make([]string, n), make([]string, n)
		deltas            = make([]int64, n)
		orders            = make([]*string, n)
		totals            = make([]*int64, n)
		at                = make([]time.Time, n)
	)
	for i := range rows {
		r := &rows[i]
		ids[i], items[i], kinds[i], deltas[i], orders[i], totals[i], at[i] = r.EventID, r.ItemID, r.Kind, r.Delta, r.OrderID, r.StockTotal, r.At
	}
	b.exec(s, ids, items, kinds, deltas, orders, totals, at)
}

// queueMerge queues one set-based statement per table (none for a table without rows); merged
// learns which order rows were written (queueOrders).
func queueMerge(b *txBatch, rows batchRows, merged map[string]bool, provider string) {
	if n := len(rows.items); n > 0 {
		var (
			ids, names, cats                   = make([]string, n), make([]string, n), make([]string, n)
			prices, stocks, limits             = make([]int64, n), make([]int64, n), make([]int64, n)
			starts, ends, archived             = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
			attrMs, attrSeq, stockMs, stockSeq = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
			created                            = make([]time.Time, n)
			images                             = make([]*string, n)
		)
		for i, r := range rows.items {
			ids[i], names[i], cats[i], prices[i], stocks[i], limits[i] = r.ID, r.Name, r.Category, r.PriceCents, r.StockTotal, r.PerUserLimit
			starts[i], ends[i], archived[i], created[i] = r.StartsAt, r.EndsAt, r.ArchivedAt, r.CreatedAt
			if r.ImageURL != "" {
				images[i] = &r.ImageURL
			}
			attrMs[i], attrSeq[i], stockMs[i], stockSeq[i] = r.AttrPosMs, r.AttrPosSeq, r.StockPosMs, r.StockPosSeq
		}
		b.exec(mergeItems, ids, names, cats, prices, stocks, limits, starts, ends, attrMs, attrSeq, stockMs, stockSeq,
			created, archived, images)
	}
	if n := len(rows.queue); n > 0 {
		items, users := make([]string, n), make([]string, n)
		joined, admitted := make([]*time.Time, n), make([]*time.Time, n)
		for i, r := range rows.queue {
			items[i], users[i], joined[i], admitted[i] = r.ItemID, r.UserID, r.JoinedAt, r.AdmittedAt
		}
		b.exec(mergeQueue, items, users, joined, admitted)
	}
	if n := len(rows.tallies); n > 0 {
		ids, items, at := make([]string, n), make([]string, n), make([]time.Time, n)
		counts := make([][]int64, len(events.TallyOutcomes))
		for j := range counts {
			counts[j] = make([]int64, n)
		}
		for i, r := range rows.tallies {
			ids[i], items[i], at[i] = r.EventID, r.ItemID, r.At
			for j := range counts {
				counts[j][i] = r.Counts[j]
			}
		}
		args := []any{ids, items, at}
		for _, c := range counts {
			args = append(args, c)
		}
		b.exec(insertTallies, args...)
	}
	queueOrders(b, mergeOrders, rows.orders, merged)
	if n := len(rows.ratings); n > 0 {
		var (
			items, users = make([]string, n), make([]string, n)
			stars        = make(smallints, n)
			ms, seq      = make([]int64, n), make([]int64, n)
			updated      = make([]time.Time, n)
		)
		for i, r := range rows.ratings {
			items[i], users[i], stars[i], ms[i], seq[i], updated[i] = r.ItemID, r.UserID, int16(r.Stars), r.PosMs, r.PosSeq, r.UpdatedAt
		}
		b.exec(mergeRatings, items, users, stars, ms, seq, updated)
	}
	queueMovements(b, mergeMovements, rows.moves)
	if n := len(rows.payments); n > 0 {
		if provider == "" {
			provider = "sim"
		}
		var (
			ids, orders, statuses = make([]string, n), make([]string, n), make([]string, n)
			providers             = make([]string, n)
			amounts, refunded     = make([]int64, n), make([]int64, n)
			created, updated      = make([]time.Time, n), make([]time.Time, n)
			intents, attempts     = make([]string, n), make([]string, n)
			disputed              = make([]*time.Time, n)
		)
		for i, r := range rows.payments {
			ids[i], orders[i], statuses[i], amounts[i], refunded[i] = r.ID, r.OrderID, r.Status, r.AmountCents, r.Refunded
			created[i], updated[i], providers[i] = r.CreatedAt, r.UpdatedAt, provider
			intents[i], disputed[i], attempts[i] = r.PaymentIntent, r.DisputedAt, r.Attempt
		}
		b.exec(mergePayments, ids, orders, providers, amounts, statuses, refunded, created, updated, intents, disputed, attempts)
	}
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
	// insertEvents records events none of which was recorded before (writeNew).
	insertEvents = stmt{"record_insert_events", `INSERT INTO processed_events (event_id, type, kafka_partition, kafka_offset, processed_at)
	SELECT event_id, type, kafka_partition, kafka_offset, $5::timestamptz
	FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[]) AS x(event_id, type, kafka_partition, kafka_offset)`}

	// insertOrders creates orders none of which exists (writeNew); same parameters as mergeOrders.
	insertOrders = stmt{"record_insert_orders", `INSERT INTO orders (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at, expires_at, restocked)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[],
		$7::timestamptz[], $8::timestamptz[], $9::timestamptz[], $10::bigint[])`}

	// insertMovements records movements none of which exists (writeNew); same parameters as
	// mergeMovements.
	insertMovements = stmt{"record_insert_movements", `INSERT INTO stock_movements (event_id, item_id, kind, delta, order_id, stock_total, at)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bigint[], $7::timestamptz[])`}

	// insertDead parks messages, once per topic, partition and offset.
	insertDead = stmt{"record_insert_dead", `INSERT INTO dead_letters (topic, kafka_partition, kafka_offset, key, value, error, received_at)
	SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::bytea[], $5::bytea[], $6::text[], $7::timestamptz[])
	ON CONFLICT DO NOTHING`}

	// claimEvents records events as processed and returns those not recorded before;
	// processed_at as in writeNew.
	claimEvents = stmt{"record_claim_events", `INSERT INTO processed_events (event_id, type, kafka_partition, kafka_offset, processed_at)
	SELECT event_id, type, kafka_partition, kafka_offset, clock_timestamp()
	FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[]) AS x(event_id, type, kafka_partition, kafka_offset)
	ON CONFLICT (event_id) DO NOTHING
	RETURNING event_id`}

	// mergeItems: attributes and stock_total from the newest event, created_at and archived_at
	// the earliest seen (LEAST skips a null).
	mergeItems = stmt{"record_merge_items", `INSERT INTO items AS i (id, name, category, price_cents, stock_total, per_user_limit,
		starts_at, ends_at, attr_pos_ms, attr_pos_seq, stock_pos_ms, stock_pos_seq, updated_at, created_at, archived_at, image_url)
	SELECT id, name, category, price_cents, stock_total, per_user_limit, starts_at, ends_at,
		attr_pos_ms, attr_pos_seq, stock_pos_ms, stock_pos_seq, now(), created_at, archived_at, image_url
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[],
		$7::timestamptz[], $8::timestamptz[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[],
		$13::timestamptz[], $14::timestamptz[], $15::text[])
		AS x(id, name, category, price_cents, stock_total, per_user_limit, starts_at, ends_at,
		attr_pos_ms, attr_pos_seq, stock_pos_ms, stock_pos_seq, created_at, archived_at, image_url)
	ON CONFLICT (id) DO UPDATE SET
	` + newer("i", [2]string{"attr_pos_ms", "attr_pos_seq"}, "name", "category", "price_cents", "per_user_limit", "starts_at", "ends_at", "image_url") + `,
	` + newer("i", [2]string{"stock_pos_ms", "stock_pos_seq"}, "stock_total") + `,
	created_at = LEAST(i.created_at, excluded.created_at),
	archived_at = LEAST(i.archived_at, excluded.archived_at),
	updated_at = now()`}

	// mergeQueue keeps each shopper's first join and first admission.
	mergeQueue = stmt{"record_merge_queue", `INSERT INTO queue_entries AS q (item_id, user_id, joined_at, admitted_at)
	SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[])
	ON CONFLICT (item_id, user_id) DO UPDATE SET
	joined_at = LEAST(q.joined_at, excluded.joined_at),
	admitted_at = LEAST(q.admitted_at, excluded.admitted_at)`}

	// insertTallies records sale.tally events; the columns follow events.TallyOutcomes.
	insertTallies = stmt{"record_insert_tallies", `INSERT INTO sale_tallies (event_id, item_id, at, reserved, sold_out,
		limit_exceeded, rate_limited, sale_not_started, sale_ended, queue_required)
	SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[], $5::bigint[], $6::bigint[],
		$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])
	ON CONFLICT (event_id) DO NOTHING`}

	mergeOrders = stmt{"record_merge_orders", `INSERT INTO orders AS o (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at, expires_at, restocked)
	SELECT id, item_id, user_id, quantity, price_cents, status, created_at, updated_at, expires_at, restocked
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[],
		$7::timestamptz[], $8::timestamptz[], $9::timestamptz[], $10::bigint[])
		AS x(id, item_id, user_id, quantity, price_cents, status, created_at, updated_at, expires_at, restocked)
	ON CONFLICT (id) DO UPDATE SET
	expires_at = COALESCE(o.expires_at, excluded.expires_at),
	restocked = GREATEST(o.restocked, excluded.restocked),
	status = CASE WHEN order_status_rank(excluded.status) > order_status_rank(o.status) THEN excluded.status ELSE o.status END,
	created_at = LEAST(o.created_at, excluded.created_at),
	updated_at = GREATEST(o.updated_at, excluded.updated_at)
	WHERE (o.item_id, o.user_id, o.quantity, o.price_cents) = (excluded.item_id, excluded.user_id, excluded.quantity, excluded.price_cents)
	RETURNING id`}

	mergeRatings = stmt{"record_merge_ratings", `INSERT INTO ratings AS r (item_id, user_id, stars, pos_ms, pos_seq, updated_at)
	SELECT item_id, user_id, stars, pos_ms, pos_seq, updated_at
	FROM unnest($1::text[], $2::text[], $3::smallint[], $4::bigint[], $5::bigint[], $6::timestamptz[])
		AS x(item_id, user_id, stars, pos_ms, pos_seq, updated_at)
	ON CONFLICT (item_id, user_id) DO UPDATE SET
	` + newer("r", [2]string{"pos_ms", "pos_seq"}, "stars", "updated_at")}

	// mergePayments: status only moves forward (paymentRank), open -> succeeded -> refunded,
	// whatever the order the events came in.
	mergePayments = stmt{"record_merge_payments", `INSERT INTO payments AS p (id, order_id, provider, amount_cents, status, refunded_cents, created_at, updated_at, payment_intent, disputed_at, attempt)
	SELECT id, order_id, provider, amount_cents, status, refunded_cents, created_at, updated_at, NULLIF(payment_intent, ''), disputed_at,
		NULLIF(attempt, '')
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bigint[], $7::timestamptz[], $8::timestamptz[],
		$9::text[], $10::timestamptz[], $11::text[])
		AS x(id, order_id, provider, amount_cents, status, refunded_cents, created_at, updated_at, payment_intent, disputed_at, attempt)
	ON CONFLICT (id) DO UPDATE SET
	payment_intent = COALESCE(p.payment_intent, excluded.payment_intent),
	attempt = COALESCE(p.attempt, excluded.attempt),
	disputed_at = LEAST(p.disputed_at, excluded.disputed_at),
	status = CASE WHEN excluded.status = 'refunded' OR p.status = 'open' THEN excluded.status ELSE p.status END,
	refunded_cents = GREATEST(p.refunded_cents, excluded.refunded_cents),
	created_at = LEAST(p.created_at, excluded.created_at),
	updated_at = GREATEST(p.updated_at, excluded.updated_at)`}

	mergeMovements = stmt{"record_merge_movements", `INSERT INTO stock_movements (event_id, item_id, kind, delta, order_id, stock_total, at)
	SELECT event_id, item_id, kind, delta, order_id, stock_total, at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bigint[], $7::timestamptz[])
		AS x(event_id, item_id, kind, delta, order_id, stock_total, at)
	ON CONFLICT (event_id) DO NOTHING`}
)

package ranking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// maxStale bounds the retries when concurrent calls keep moving an item between categories.
const maxStale = 5

var errStale = errors.New("ranking: the item's category kept changing; try again")

// Store keeps ratings and leaderboards in Redis.
type Store struct {
	rdb  redis.UniversalClient
	keys keyspace.Space
	opt  Options
}

// NewStore returns a Store over rdb. The options are used as given: config states their
// defaults and checks their ranges.
func NewStore(rdb redis.UniversalClient, keys keyspace.Space, opt Options) *Store {
	return &Store{rdb: rdb, keys: keys, opt: opt}
}

// Size is the bound N of every board.
func (s *Store) Size() int { return s.opt.Size }

// Rate sets user's stars (1..5) for an item of the given category, replacing an earlier
// rating by the same user, and moves the item on its boards. The user must have paid for the
// item (ErrNotABuyer). The caller checks that the item exists.
func (s *Store) Rate(ctx context.Context, item, category, user string, stars int) (Rating, error) {
	r, _, err := s.rate(ctx, item, category, user, stars, "set")
	return r, err
}

// Restore is Rate for restore's replay of a rating from the record: it sets user's stars only if
// the user has no rating of the item now (checked in the script, so newer stars stand) and emits
// no rating.set (the record holds it). It reports whether it wrote; the Rating is the item's.
func (s *Store) Restore(ctx context.Context, item, category, user string, stars int) (Rating, bool, error) {
	r, kept, err := s.rate(ctx, item, category, user, stars, "restore")
	return r, err == nil && !kept, err
}

// rate runs rate.lua in mode "set" or "restore"; kept reports a restore that found a rating.
func (s *Store) rate(ctx context.Context, item, category, user string, stars int, mode string) (Rating, bool, error) {
	switch {
	case !keyspace.ValidID(item) || !keyspace.ValidID(user):
		return Rating{}, false, fmt.Errorf("%w: bad item or user id", ErrInvalid)
	case stars < MinStars || stars > MaxStars:
		return Rating{}, false, fmt.Errorf("%w: stars must be an integer from 1 to 5", ErrInvalid)
	case len(category) > MaxCategory:
		return Rating{}, false, fmt.Errorf("%w: category is at most 64 bytes", ErrInvalid)
	}
	stats := s.keys.ItemRatingStats(item)
	// One round trip for both reads (two slots: the buyer check is in the item's slot, so it
	// cannot be part of the script; a paid order is final, so the answer cannot go stale).
	pipe := s.rdb.Pipeline()
	paidCmd := pipe.HGet(ctx, s.keys.Item(item).PaidBy(), user)
	catCmd := pipe.HGet(ctx, stats, "cat")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Rating{}, false, fmt.Errorf("ranking: rate %s: %w", item, err)
	}
	if paid, _ := strconv.ParseInt(paidCmd.Val(), 10, 64); paid <= 0 {
		return Rating{}, false, fmt.Errorf("ranking: rate %s: %w", item, ErrNotABuyer)
	}
	seen := catCmd.Val()
	for range maxStale {
		keys := []string{s.keys.ItemRatings(item), stats, s.keys.RankOutbox()}
		keys = append(keys, s.boardKeys(category, seen)...)
		args := []any{item, user, stars, category, seen, fmtFloat(s.opt.PriorMean),
			fmtFloat(s.opt.PriorWeight), s.opt.Size, mode}
		reply, err := rateScript.Run(ctx, s.rdb, keys, args...).Slice()
		if err != nil {
			return Rating{}, false, fmt.Errorf("ranking: rate %s: %w", item, err)
		}
		if len(reply) == 2 && reply[0] == "stale" {
			seen, _ = reply[1].(string)
			continue
		}
		if len(reply) != 3 || (reply[0] != "ok" && reply[0] != "kept") {
			return Rating{}, false, fmt.Errorf("ranking: rate %s: unexpected reply %v", item, reply)
		}
		avgS, _ := reply[1].(string)
		avg, err := strconv.ParseFloat(avgS, 64)
		count, ok := reply[2].(int64)
		if err != nil || !ok {
			return Rating{}, false, fmt.Errorf("ranking: rate %s: unexpected reply %v", item, reply)
		}
		return Rating{ItemID: item, Average: avg, Count: count}, reply[0] == "kept", nil
	}
	return Rating{}, false, fmt.Errorf("ranking: rate %s: %w", item, errStale)
}

// boardKeys lists the category boards a rating or a move touches after the overall board:
// the new category's (unless it is ""), then the old category's (if it is another, non-empty one).
func (s *Store) boardKeys(category, seen string) []string {
	overall := s.keys.TopRatedBoard("")
	keys := []string{overall.Index, overall.Top}
	if category != "" {
		b := s.keys.TopRatedBoard(category)
		keys = append(keys, b.Index, b.Top)
	}
	if seen != "" && seen != category {
		b := s.keys.TopRatedBoard(seen)
		keys = append(keys, b.Index, b.Top)
	}
	return keys
}

// SetCategory moves a rated item to its new category's top-rated board without waiting for
// its next rating (which would move it too). An unrated item is left alone.
func (s *Store) SetCategory(ctx context.Context, item, category string) error {
	if !keyspace.ValidID(item) || len(category) > MaxCategory {
		return fmt.Errorf("%w: bad item id or category", ErrInvalid)
	}
	stats := s.keys.ItemRatingStats(item)
	seen, err := s.rdb.HGet(ctx, stats, "cat").Result()
	if errors.Is(err, redis.Nil) {
		return nil // never rated
	}
	if err != nil {
		return fmt.Errorf("ranking: recategorize %s: %w", item, err)
	}
	for range maxStale {
		keys := []string{stats, s.keys.TopRatedBoard("").Index}
		if seen != category {
			keys = append(keys, s.boardKeys(category, seen)[2:]...)
		}
		reply, err := recategorizeScript.Run(ctx, s.rdb, keys, item, category, seen, s.opt.Size).Slice()
		if err != nil {
			return fmt.Errorf("ranking: recategorize %s: %w", item, err)
		}
		if len(reply) == 2 && reply[0] == "stale" {
			seen, _ = reply[1].(string)
			continue
		}
		return nil // ok or unrated
	}
	return fmt.Errorf("ranking: recategorize %s: %w", item, errStale)
}

// SetCategories is SetCategory for many items (item -> category), as an import needs it: the
// categories they are ranked under are read in pipelines, and only rated items ranked under
// another category are moved. It returns the first error; a failed move does not stop the
// others, a failed read of the categories does (those items move at their next rating).
func (s *Store) SetCategories(ctx context.Context, categories map[string]string) error {
	ids := make([]string, 0, len(categories))
	for id := range categories {
		ids = append(ids, id)
	}
	var first error
	for len(ids) > 0 {
		n := min(len(ids), readsPerPipeline)
		pipe := s.rdb.Pipeline()
		seen := make([]*redis.StringCmd, n)
		for i, id := range ids[:n] {
			seen[i] = pipe.HGet(ctx, s.keys.ItemRatingStats(id), "cat")
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("ranking: recategorize %d items: %w", len(categories), err)
		}
		for i, id := range ids[:n] {
			// Never rated (redis.Nil), or already under its category: nothing to move.
			if cat, err := seen[i].Result(); err == nil && cat != categories[id] {
				if err := s.SetCategory(ctx, id, categories[id]); err != nil && first == nil {
					first = err
				}
			}
		}
		ids = ids[n:]
	}
	return first
}

// readsPerPipeline bounds the commands of one pipeline of reads (SetCategories).
const readsPerPipeline = 1000

// SetSold puts an item's units on the best-sellers board without a number: it only raises
// the figure, so it never undoes a newer numbered report of the live shop (see SetSoldAt; a
// restore numbers its figure). Calls are idempotent in any order.
func (s *Store) SetSold(ctx context.Context, item string, units int64) error {
	return s.SetSoldAt(ctx, item, units, 0)
}

// SetSoldAt puts an item's units on the best-sellers board (paid, less refunded orders'
// units: the figure goes down on a refund) as the item's script numbered the figure (seq >= 1):
// a report numbered at or below the last one applied is late and changes nothing, so calls are
// idempotent in any order. seq 0 is SetSold.
func (s *Store) SetSoldAt(ctx context.Context, item string, units, seq int64) error {
	if !keyspace.ValidID(item) || units < 0 || seq < 0 {
		return fmt.Errorf("%w: bad item id, units or number", ErrInvalid)
	}
	b := s.keys.BestSellersBoard()
	if err := soldScript.Run(ctx, s.rdb, []string{b.Index, b.Top, s.keys.BestSellersNumbers()}, item, units, s.opt.Size, seq).Err(); err != nil {
		return fmt.Errorf("ranking: sold %s: %w", item, err)
	}
	return nil
}

// PaidChanged is an orders.Hooks.PaidChanged: it puts the item's units on the best-sellers
// board after a payment or a refund and logs a failure (the payment or refund itself is done;
// the item's next one sets the figure again).
func (s *Store) PaidChanged(ctx context.Context, item string, sold, seq int64) {
	if err := s.SetSoldAt(context.WithoutCancel(ctx), item, sold, seq); err != nil {
		slog.Warn("best-sellers board not updated", "item", item, "sold", sold, "err", err)
	}
}

// TopRated returns the best limit (1..N) items by top-rated score, overall (category "")
// or in one category. One Redis round trip.
func (s *Store) TopRated(ctx context.Context, category string, limit int) ([]Entry, error) {
	if len(category) > MaxCategory {
		return nil, fmt.Errorf("%w: category is at most 64 bytes", ErrInvalid)
	}
	return s.read(ctx, s.keys.TopRatedBoard(category), limit)
}

// BestSellers returns the limit (1..N) items with the most units paid. One Redis round trip.
func (s *Store) BestSellers(ctx context.Context, limit int) ([]Entry, error) {
	return s.read(ctx, s.keys.BestSellersBoard(), limit)
}

func (s *Store) read(ctx context.Context, b keyspace.Board, limit int) ([]Entry, error) {
	if limit < 1 || limit > s.opt.Size {
		return nil, fmt.Errorf("%w: limit must be from 1 to %d", ErrInvalid, s.opt.Size)
	}
	zs, err := s.rdb.ZRangeWithScores(ctx, b.Top, 0, int64(limit-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("ranking: read %s: %w", b.Top, err)
	}
	out := make([]Entry, len(zs))
	for i, z := range zs {
		member, _ := z.Member.(string)
		// Scores are stored negated so Redis' ascending order is best first.
		out[i] = Entry{Rank: i + 1, ItemID: itemOf(member), Score: -z.Score}
	}
	return out, nil
}

// fmtFloat formats f so that Lua's tonumber reads back the same float64.
func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

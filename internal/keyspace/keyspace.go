// Package keyspace owns flashsale's Redis key layout (see docs/design.md). Every key of one
// item shares the item's hash tag, so each item script runs in one Redis Cluster slot.
package keyspace

import (
	"strconv"
	"strings"
)

// ValidID reports whether s is a valid item or user id: [A-Za-z0-9_-]{1,64} as the contract
// defines them. A loop, not a regexp: it runs several times on every purchase.
func ValidID(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// Space builds keys under one prefix ("fs:" in production, random in tests).
type Space struct{ Prefix string }

// Item returns the keys of one item.
func (s Space) Item(id string) Item {
	return Item{ID: id, base: s.Prefix + "{i:" + id + "}:"}
}

// Catalog is the set of all item ids.
func (s Space) Catalog() string { return s.Prefix + "catalog" }

// Rank returns the base of the ranking slot's keys.
func (s Space) Rank() string { return s.Prefix + "{rank}:" }

// Item holds the key names of one item's slot.
type Item struct {
	ID   string
	base string
}

func (k Item) Hash() string   { return k.base + "item" }
func (k Item) Orders() string { return k.base + "orders" }
func (k Item) Held() string   { return k.base + "held" }
func (k Item) PaidBy() string { return k.base + "paidby" }
func (k Item) Expiry() string { return k.base + "expiry" }
func (k Item) Outbox() string { return k.base + "outbox" }

// UserOrders is the user's order index for this item.
func (k Item) UserOrders(user string) string { return k.base + "user:" + user }

// Idempotency is where an idempotency key's order id is kept.
func (k Item) Idempotency(user, key string) string { return k.base + "idem:" + user + ":" + key }

// PurchaseLimit is the user's purchase rate-limit state on this item.
func (k Item) PurchaseLimit(user string) string { return k.base + "rl:" + user }

// OrderID builds an order id from its item and sequence number.
func OrderID(item string, seq string) string { return item + "." + seq }

// ItemOfOrder returns the item id an order id belongs to, or false for a malformed id.
func ItemOfOrder(orderID string) (string, bool) {
	item, seq, ok := strings.Cut(orderID, ".")
	if !ok || !ValidID(item) || seq == "" || len(seq) > 20 {
		return "", false
	}
	for _, c := range seq {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return item, true
}

// RankOutbox is the ranking slot's outbox stream (rating.set events).
func (s Space) RankOutbox() string { return s.Rank() + "outbox" }

// Board is one bounded leaderboard in the ranking slot: Index ranks every member, Top holds
// only the best N, kept equal to the first N of Index by the ranking scripts.
type Board struct{ Index, Top string }

// TopRatedBoard is the top-rated board of a category ("" = all items).
func (s Space) TopRatedBoard(category string) Board {
	if category == "" {
		return Board{Index: s.Rank() + "rated:idx", Top: s.Rank() + "rated:top"}
	}
	// The category goes last so no category name can collide with another key.
	return Board{Index: s.Rank() + "rated:idx:c:" + category, Top: s.Rank() + "rated:top:c:" + category}
}

// BestSellersBoard ranks items by units paid.
func (s Space) BestSellersBoard() Board {
	return Board{Index: s.Rank() + "sold:idx", Top: s.Rank() + "sold:top"}
}

// ItemRatings is the hash user -> stars of one item, in the ranking slot.
func (s Space) ItemRatings(item string) string { return s.Rank() + "ratings:" + item }

// ItemRatingStats is the hash count, sum, cat (the category it is ranked under) of one item.
func (s Space) ItemRatingStats(item string) string { return s.Rank() + "rstats:" + item }

// RateLimit is the GCRA state of one subject (user id or client IP) under one named policy.
// Each subject has its own hash tag, so limiter keys spread over a cluster's slots.
func (s Space) RateLimit(policy, subject string) string {
	return s.Prefix + "{rl:" + policy + ":" + subject + "}"
}

// Lock is a cluster-wide job lock and its fencing counter; both share the lock's hash tag so
// obtaining the lock and taking the next fencing number is one script.
func (s Space) Lock(name string) (key, fence string) {
	base := s.Prefix + "{lock:" + name + "}"
	return base, base + ":fence"
}

// RestoreFence is the fencing number of the newest restore that wrote this item, kept in the
// item's slot so every restore script of the item can refuse a stale restorer.
func (k Item) RestoreFence() string { return k.base + "restore:fence" }

// StatsSecond is the sale monitor's hash of one wall-clock second (unix seconds): every api
// instance adds its counts to it and sets the shared gauges (internal/stats). All seconds
// share the hash tag {stats}, so reading the last minutes is one pipeline to one node.
func (s Space) StatsSecond(unix int64) string {
	return s.Prefix + "{stats}:s:" + strconv.FormatInt(unix, 10)
}

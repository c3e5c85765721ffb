// Package keyspace owns flashsale's Redis key layout (docs/design.md). Items fall into a fixed
// number of virtual shards whose hash tag every key of the item and the shard's shared keys
// carry: each script runs in one Cluster slot, and watchers watch shards, not items.
package keyspace

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Shards is the number of virtual shards. It is part of the data layout: changing it moves
// every item to other keys, so it is a constant, not a setting. 16 keeps the idle cost of an
// api (a few commands per shard per second) far under the budget and still spreads the shards
// over the masters of a small cluster.
const Shards = 16

// ShardOf returns the shard of an item: FNV-1a of its id, modulo Shards. Stable forever.
func ShardOf(item string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(item))
	return int(h.Sum32() % Shards)
}

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

// Shard returns the keys of one shard (0 <= n < Shards).
func (s Space) Shard(n int) Shard {
	return Shard{N: n, base: s.Prefix + "{s:" + strconv.Itoa(n) + "}:"}
}

// Item returns the keys of one item, in its shard's slot.
func (s Space) Item(id string) Item {
	sh := s.Shard(ShardOf(id))
	return Item{ID: id, Shard: sh, base: sh.base + "i:" + id + ":"}
}

// Shard holds the key names shared by every item of one shard.
type Shard struct {
	N    int
	base string
}

// Outbox is the shard's outbox stream: every event of its items, in the order written.
func (s Shard) Outbox() string { return s.base + "outbox" }

// Expiry is the shard's expiry index: one member per purchase batch ("<item>.<first>-<last>")
// or per order ("<item>.<seq>") -> expires ms (see ExpiryEntry).
func (s Shard) Expiry() string { return s.base + "expiry" }

// Changed is the shard's change log: item id -> the shard clock at its latest change, so a
// reader that remembers the highest clock it saw asks for exactly the items changed since.
func (s Shard) Changed() string { return s.base + "changed" }

// Clock is the shard's change clock (only grows; see lua/lib/changed.lua).
func (s Shard) Clock() string { return s.base + "clock" }

// Marker is the marker of the data the shard's slot holds (internal/datamark).
func (s Shard) Marker() string { return s.base + "marker" }

// PaymentOrder is the index payment id -> order id that a provider's webhook is looked up by
// (never by the event's metadata). It has its own hash tag: the payment id alone names it.
func (s Space) PaymentOrder(paymentID string) string { return s.Prefix + "{pay:" + paymentID + "}" }

// UserOrderIndex is the user's order index: a hash item id -> a counter of changes of the user's
// orders of that item, under the user's hash tag so "my orders" reads one key. The purchase
// path grows it in its script's pipeline (another slot), the relay from every event of the
// user's orders (internal/orders, index.go); docs/design.md, "Which keys live in which slot".
func (s Space) UserOrderIndex(user string) string { return s.Prefix + "{u:" + user + "}:items" }

// Catalog is the set of all item ids.
func (s Space) Catalog() string { return s.Prefix + "catalog" }

// Rank returns the base of the ranking slot's keys.
func (s Space) Rank() string { return s.Prefix + "{rank}:" }

// Item holds the key names of one item; the shard-wide ones are its shard's.
type Item struct {
	ID    string
	Shard Shard
	base  string
}

func (k Item) Hash() string   { return k.base + "item" }
func (k Item) Orders() string { return k.base + "orders" }
func (k Item) Held() string   { return k.base + "held" }
func (k Item) PaidBy() string { return k.base + "paidby" }

// UserOrders is the item's hash user -> the user's order sequence numbers of the item,
// comma-separated, ascending ("3,17,42"), written once per purchase batch.
func (k Item) UserOrders() string { return k.base + "uorders" }

// Payments is the item's hash order id -> "payment id|state|event id": the order's one payment
// at the provider and how far it got (open, paid, refunding, refunded; see lua/orders/pay.lua).
func (k Item) Payments() string { return k.base + "payments" }

// Refunds is the item's hash order id -> "idempotency key|restock" of an admin's refund of
// the order (lua/orders/refund_order.lua).
func (k Item) Refunds() string { return k.base + "refunds" }

// Expiry, Outbox, Changed and Clock are the item's shard's (see Shard).
func (k Item) Expiry() string  { return k.Shard.Expiry() }
func (k Item) Outbox() string  { return k.Shard.Outbox() }
func (k Item) Changed() string { return k.Shard.Changed() }
func (k Item) Clock() string   { return k.Shard.Clock() }

// Idempotency is where an idempotency key's order id is kept.
func (k Item) Idempotency(user, key string) string { return k.base + "idem:" + user + ":" + key }

// StockIdempotency is the recorded reply of an admin stock change made with an Idempotency-Key.
func (k Item) StockIdempotency(key string) string { return k.base + "stockidem:" + key }

// PurchaseLimits is the item's purchase rate-limit state: a hash user -> GCRA TAT (8 bytes, a
// little-endian double: purchase.lua).
func (k Item) PurchaseLimits() string { return k.base + "rl" }

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

// MaxExpiryRange is the most orders one expiry index member names: a purchase batch's
// attempts (the purchase script's bound).
const MaxExpiryRange = 256

// ExpiryEntry parses a member of a shard's expiry index: "<item>.<seq>" (one order) or
// "<item>.<first>-<last>" (the orders first..last of one purchase batch, at most
// MaxExpiryRange). ok is false for anything else.
func ExpiryEntry(member string) (item string, first, last uint64, ok bool) {
	item, rest, found := strings.Cut(member, ".")
	if !found || !ValidID(item) {
		return "", 0, 0, false
	}
	a, b, isRange := strings.Cut(rest, "-")
	first, ok = parseSeq(a)
	if !ok {
		return "", 0, 0, false
	}
	last = first
	if isRange {
		if last, ok = parseSeq(b); !ok || last < first || last-first >= MaxExpiryRange {
			return "", 0, 0, false
		}
	}
	return item, first, last, true
}

// parseSeq reads an order sequence number: 1..20 decimal digits.
func parseSeq(s string) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// RankMarker is the marker of the data the ranking slot holds (internal/datamark).
func (s Space) RankMarker() string { return s.Rank() + "marker" }

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

// BestSellersNumbers is the hash item -> number of the figure the best-sellers board holds
// for it (see ranking.Store.SetSoldAt).
func (s Space) BestSellersNumbers() string { return s.Rank() + "sold:seq" }

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

// Restoring marks an item a restore is rebuilding (from restore_begin.lua to
// restore_finish.lua): upsert_item.lua must not take its missing hash for a new item.
func (k Item) Restoring() string { return k.base + "restore:active" }

// The waiting room of an item (internal/queue, docs/waiting-room.md). Every queue key is in
// the item's slot, so joining, admitting and the purchase script's pass check each touch one
// slot.

// QueueLine is the zset of waiting shoppers: user -> place in the order (lowest first).
func (k Item) QueueLine() string { return k.base + "q:line" }

// QueueTickets is the hash user -> packed ticket ("state|line number|pass id|pass expiry ms"),
// the one queue key purchase.lua reads and writes (it spends passes).
func (k Item) QueueTickets() string { return k.base + "q:tickets" }

// QueueState is the hash of the line's counters (joins before and after the start, shoppers
// admitted, the rate limiter's state).
func (k Item) QueueState() string { return k.base + "q:state" }

// QueuePasses is the zset of issued passes not yet past their expiry: pass id -> expiry ms.
func (k Item) QueuePasses() string { return k.base + "q:passes" }

// QueueRecent is the zset of the last second's admissions (the strict per-second bound).
func (k Item) QueueRecent() string { return k.base + "q:recent" }

// StatsSecond is the sale monitor's hash of one wall-clock second (unix seconds): every api
// instance adds its counts to it and sets the shared gauges (internal/stats). All seconds
// share the hash tag {stats}, so reading the last minutes is one pipeline to one node.
func (s Space) StatsSecond(unix int64) string {
	return s.Prefix + "{stats}:s:" + strconv.FormatInt(unix, 10)
}

package reconcile

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Drift kinds: each names one way Redis (the live sale) and Postgres (the record) disagree.
const (
	KindItemMissing   = "item_missing_in_postgres"
	KindItemExtra     = "item_missing_in_redis"
	KindStock         = "stock_counter"  // Field: stock_total | stock_left | reserved | paid
	KindItemAttr      = "item_attribute" // Field: name | category | price_cents | per_user_limit | starts_at | ends_at (unix ms, 0 = none)
	KindOrderMissing  = "order_missing_in_postgres"
	KindOrderExtra    = "order_missing_in_redis"
	KindOrderStatus   = "order_status"
	KindOrderUser     = "order_user"
	KindOrderQuantity = "order_quantity"
	KindOrderPrice    = "order_price"
	KindRating        = "rating" // UserID: the rater; Redis, Postgres: the stars ("" = no rating)
	// KindOrderIDReused: Redis and the record hold two different orders (created at different
	// times) under one id; Redis, Postgres: each side's order.
	KindOrderIDReused = "order_id_reused"
	// KindConflictParked: an order event the record parked in dead_letters because its id
	// already named another order; Postgres: the dead letter. Reported until it is deleted.
	KindConflictParked = "order_conflict_parked"
)

// Drift is one confirmed disagreement: it held after every event that was in flight when it was
// seen had reached Postgres, while Redis did not change. Values are as each side holds them
// ("" = absent).
type Drift struct {
	Kind     string `json:"kind"`
	ItemID   string `json:"item_id"`
	OrderID  string `json:"order_id,omitempty"`
	UserID   string `json:"user_id,omitempty"` // the rater, for rating drift
	Field    string `json:"field,omitempty"`
	Redis    string `json:"redis"`
	Postgres string `json:"postgres"`
}

func (d Drift) key() string {
	return d.Kind + "|" + d.ItemID + "|" + d.OrderID + "|" + d.UserID + "|" + d.Field
}

// Unverified is an item whose check could not finish: its events were still in flight when the
// settle time ran out (Kafka down, consumer stopped), or it kept changing in every round. It is
// not drift; the next run checks it again.
type Unverified struct {
	ItemID string   `json:"item_id"`
	Orders []string `json:"orders,omitempty"` // order ids still differing when the run gave up
	Users  []string `json:"users,omitempty"`  // raters whose ratings still differed
	Reason string   `json:"reason"`
}

// InFlight is what was still on its way to Postgres when the run started.
type InFlight struct {
	OutboxBacklog int64 `json:"outbox_backlog"` // entries in the items' outbox streams
	ConsumerLag   int64 `json:"consumer_lag"`   // messages not yet committed by the consumer (-1 unknown)
}

// NotFixed is a drift repair could not fix, and why.
type NotFixed struct {
	Drift
	Reason string `json:"reason"`
}

// Repair is what --repair did.
type Repair struct {
	Reemitted int        `json:"reemitted_events"` // events appended to outbox streams
	Fixed     []Drift    `json:"fixed"`
	NotFixed  []NotFixed `json:"not_fixed"`
}

// Report is one batch run's result, stored as the run's drift JSON.
type Report struct {
	RunID         int64        `json:"run_id"`
	FencingToken  int64        `json:"fencing_token"`
	StartedAt     time.Time    `json:"started_at"`
	FinishedAt    time.Time    `json:"finished_at"`
	DurationMs    int64        `json:"duration_ms"`
	Items         int          `json:"items"`
	Orders        int          `json:"orders"`        // distinct order ids compared
	Pruned        int          `json:"pruned_orders"` // final orders only Postgres keeps (FLASHSALE_ORDER_RETENTION): not compared
	RowsCompared  int          `json:"rows_compared"` // Redis orders + Postgres orders + items of both sides
	RowsPerSecond float64      `json:"rows_per_second"`
	Rounds        int          `json:"settle_rounds"` // re-check rounds the candidates needed
	Candidates    int          `json:"candidates"`    // differences seen in the first pass
	InFlight      InFlight     `json:"in_flight"`
	Drift         []Drift      `json:"drift"`
	Unverified    []Unverified `json:"unverified"`
	Repair        *Repair      `json:"repair,omitempty"`
	// Restarts is how often the comparison started over because Redis went away (a failover).
	Restarts int `json:"restarts,omitempty"`
	// Payments: every succeeded payment recorded is exactly one paid order or one refund.
	Payments *PaymentCheck `json:"payments,omitempty"`
	// Money: the provider's payments of the window against the record (drift by kind).
	Money *MoneyCheck `json:"money,omitempty"`
}

// paymentDrift is how many payments do not add up.
func (r *Report) paymentDrift() int {
	if r.Payments == nil {
		return 0
	}
	return len(r.Payments.Drift)
}

// Clean reports whether the run found no drift and verified everything.
func (r *Report) Clean() bool {
	return len(r.Drift) == 0 && len(r.Unverified) == 0 && r.paymentDrift() == 0 && (r.Money == nil || len(r.Money.Drift) == 0)
}

// DriftRemains reports whether the run leaves drift behind, which `reconciler batch` exits 3
// on: drift found without --repair, drift --repair could not fix, or items it could not
// verify. A repair that fixed everything it found leaves none (the record catches up from
// the re-emitted events), although the report still lists what it found.
func (r *Report) DriftRemains() bool {
	if len(r.Unverified) > 0 || r.paymentDrift() > 0 { // payments are reported, never repaired
		return true
	}
	if r.Money != nil && r.Money.Skipped != "" || r.Money.unrepaired() > 0 { // money drift other than a refunded payment needs a person
		return true
	}
	if r.Repair == nil {
		return len(r.Drift) > 0
	}
	return len(r.Repair.NotFixed) > 0 || len(r.Repair.Fixed) < len(r.Drift)
}

// WriteTable writes the report as a readable table (for a terminal).
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "reconciliation run %d (fencing %d): %d items, %d orders, %d rows in %s (%.0f rows/s)\n",
		r.RunID, r.FencingToken, r.Items, r.Orders, r.RowsCompared,
		time.Duration(r.DurationMs)*time.Millisecond, r.RowsPerSecond)
	fmt.Fprintf(w, "in flight at start: %d outbox entries, consumer lag %d; %d candidates settled in %d rounds\n",
		r.InFlight.OutboxBacklog, r.InFlight.ConsumerLag, r.Candidates, r.Rounds)
	if r.Restarts > 0 {
		fmt.Fprintf(w, "Redis went away during the run (a failover?): the comparison started over %d times\n", r.Restarts)
	}
	if len(r.Drift) == 0 {
		fmt.Fprintln(w, "no drift")
	} else {
		fmt.Fprintf(w, "%d drift:\n", len(r.Drift))
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tITEM\tORDER\tUSER\tFIELD\tREDIS\tPOSTGRES")
		for _, d := range r.Drift {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Kind, d.ItemID, dash(d.OrderID), dash(d.UserID), dash(d.Field), dash(d.Redis), dash(d.Postgres))
		}
		tw.Flush()
	}
	for _, u := range r.Unverified {
		fmt.Fprintf(w, "unverified: item %s (%d orders, %d ratings): %s\n", u.ItemID, len(u.Orders), len(u.Users), u.Reason)
	}
	if m := r.Money; m != nil {
		fmt.Fprintf(w, "money: %d payments listed since %s (%d not a shop order's), %d drift\n",
			m.Listed, m.From.Format(time.RFC3339), m.Foreign, len(m.Drift))
		if m.Skipped != "" {
			fmt.Fprintf(w, "  money check not done: %s\n", m.Skipped)
		}
		for _, d := range m.Drift {
			fmt.Fprintf(w, "  %s: payment %s order %s (provider %s %d, record %s %d) %s\n", d.Kind, d.PaymentID,
				d.OrderID, dash(d.ProviderStatus), d.ProviderCents, dash(d.OrderStatus), d.RecordCents, d.Repair)
		}
	}
	if r.Repair != nil {
		fmt.Fprintf(w, "repair: %d events re-emitted, %d fixed, %d not fixed\n",
			r.Repair.Reemitted, len(r.Repair.Fixed), len(r.Repair.NotFixed))
		for _, n := range r.Repair.NotFixed {
			fmt.Fprintf(w, "  not fixed: %s %s %s: %s\n", n.Kind, n.ItemID, strings.TrimSpace(n.OrderID+" "+n.UserID+" "+n.Field), n.Reason)
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

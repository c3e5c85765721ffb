// Package orders owns the order lifecycle after a purchase reserved stock: reading orders,
// paying, cancelling, and expiring reservations nobody paid.
package orders

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Status is an order's state, in the contract's words.
type Status string

const (
	Reserved  Status = "reserved"
	Paid      Status = "paid"
	Cancelled Status = "cancelled"
	Expired   Status = "expired"
	// Refunded: a paid order whose payment was refunded in full (by an admin, or at the
	// provider); its units stay sold unless the refund asked to restock.
	Refunded Status = "refunded"
)

// Sentinel errors; the HTTP layer maps them to the contract's codes.
var (
	ErrNotFound     = errors.New("order not found")
	ErrInvalidState = errors.New("order is not reserved")
	ErrExpired      = errors.New("reservation expired")
	// ErrPaymentProcessing: the order's payment is on its way (processing); the provider
	// decides it, so the order cannot be cancelled meanwhile.
	ErrPaymentProcessing = errors.New("the order's payment is processing")
)

// errReply is a script reply of an unexpected shape (a bug or a script version mismatch).
var errReply = errors.New("orders: script reply malformed")

// Order is one reservation of stock by one user.
type Order struct {
	ID         string    `json:"id"`
	ItemID     string    `json:"item_id"`
	UserID     string    `json:"user_id"`
	Quantity   int64     `json:"quantity"`
	PriceCents int64     `json:"price_cents"`
	Status     Status    `json:"status"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// PaymentID is the order's current payment attempt (its Checkout Session), "" until
	// checkout (null in JSON).
	PaymentID string `json:"payment_id"`
	// PaymentStatus is what the provider last said of it, in the contract's words (open,
	// processing, succeeded, failed, canceled, refunded, disputed); "" (null) before checkout.
	PaymentStatus string `json:"payment_status"`
}

// MarshalJSON writes the contract's Order: payment_id and payment_status are null until checkout.
func (o Order) MarshalJSON() ([]byte, error) {
	type plain Order
	var pid, pst *string
	if o.PaymentID != "" {
		pid = &o.PaymentID
	}
	if o.PaymentStatus != "" {
		pst = &o.PaymentStatus
	}
	return json.Marshal(struct {
		plain
		PaymentID     *string `json:"payment_id"`
		PaymentStatus *string `json:"payment_status"`
	}{plain(o), pid, pst})
}

// Unpack decodes the packed form the scripts store: "user|quantity|price_cents|status|created_ms|expires_ms".
func Unpack(id, item, packed string) (Order, error) {
	var f [6]string // user|quantity|price_cents|status|created_ms|expires_ms
	rest := packed
	for i := range 5 {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, "|"); !ok {
			return Order{}, fmt.Errorf("orders: malformed record for %s: %q", id, packed)
		}
	}
	if strings.Contains(rest, "|") {
		return Order{}, fmt.Errorf("orders: malformed record for %s: %q", id, packed)
	}
	f[5] = rest
	qty, err1 := strconv.ParseInt(f[1], 10, 64)
	price, err2 := strconv.ParseInt(f[2], 10, 64)
	created, err3 := strconv.ParseInt(f[4], 10, 64)
	expires, err4 := strconv.ParseInt(f[5], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Order{}, fmt.Errorf("orders: malformed record for %s: %w", id, err)
	}
	return Order{
		ID: id, ItemID: item, UserID: f[0], Quantity: qty, PriceCents: price,
		Status:    Status(f[3]),
		CreatedAt: time.UnixMilli(created).UTC(),
		ExpiresAt: time.UnixMilli(expires).UTC(),
	}, nil
}

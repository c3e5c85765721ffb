package events

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// decodeFast decodes the JSON the relay writes (json.Marshal of an Event) without reflection,
// which is most of the reconciler's CPU per event. It takes a strict subset (Event's exact keys
// once each, strings without escapes, int64 integers, times as time.Time reads them); for
// anything else ok is false and Parse asks encoding/json. FuzzDecodeFast holds the two equal.
func decodeFast(data []byte) (e Event, ok bool) {
	d := decoder{data: data}
	d.space()
	if !d.byte('{') {
		return Event{}, false
	}
	// One allocation for every string field (they are slices of src), one for the integers
	// and one for the times, instead of one each.
	src := string(data)
	var ints *[6]int64
	var times *[4]time.Time // at, starts_at, ends_at, expires_at
	var seen uint32
	d.space()
	if d.byte('}') {
		return Event{}, d.end()
	}
	for {
		d.space()
		key, ok := d.quoted()
		if !ok {
			return Event{}, false
		}
		key = key[1 : len(key)-1]
		d.space()
		if !d.byte(':') {
			return Event{}, false
		}
		d.space()
		f := fieldOf(key)
		if f < 0 || seen&(1<<f) != 0 {
			return Event{}, false
		}
		seen |= 1 << f
		switch f {
		case fEventID, fType, fItemID, fOrderID, fUserID, fName, fCategory, fPaymentID:
			q, ok := d.quoted()
			if !ok {
				return Event{}, false
			}
			v := src[d.i-len(q)+1 : d.i-1]
			switch f {
			case fEventID:
				e.EventID = v
			case fType:
				e.Type = v
			case fItemID:
				e.ItemID = v
			case fOrderID:
				e.OrderID = v
			case fUserID:
				e.UserID = v
			case fName:
				e.Name = v
			case fCategory:
				e.Category = v
			case fPaymentID:
				e.PaymentID = v
			}
		case fQuantity, fPriceCents, fStars, fDelta, fStockTotal, fPerUserLimit:
			n, ok := d.integer()
			if !ok {
				return Event{}, false
			}
			if ints == nil {
				ints = new([6]int64)
			}
			p := &ints[f-fQuantity]
			*p = n
			switch f {
			case fQuantity:
				e.Quantity = p
			case fPriceCents:
				e.PriceCents = p
			case fStars:
				e.Stars = p
			case fDelta:
				e.Delta = p
			case fStockTotal:
				e.StockTotal = p
			case fPerUserLimit:
				e.PerUserLimit = p
			}
		case fAt, fStartsAt, fEndsAt, fExpiresAt:
			raw, ok := d.quoted()
			if !ok {
				return Event{}, false
			}
			if times == nil {
				times = new([4]time.Time)
			}
			t := &times[f-fAt]
			if t.UnmarshalJSON(raw) != nil {
				return Event{}, false
			}
			switch f {
			case fAt:
				e.At = *t
			case fStartsAt:
				e.StartsAt = t
			case fEndsAt:
				e.EndsAt = t
			case fExpiresAt:
				e.ExpiresAt = t
			}
		}
		d.space()
		if d.byte(',') {
			continue
		}
		if d.byte('}') {
			return e, d.end()
		}
		return Event{}, false
	}
}

// Field numbers of decodeFast; the six integers are consecutive.
const (
	fEventID = iota
	fType
	fItemID
	fOrderID
	fUserID
	fName
	fCategory
	fPaymentID
	fQuantity
	fPriceCents
	fStars
	fDelta
	fStockTotal
	fPerUserLimit
	fAt
	fStartsAt
	fEndsAt
	fExpiresAt
)

// fieldOf is the field of an exact JSON key of Event, or -1.
func fieldOf(key []byte) int {
	switch string(key) { // no allocation: the compiler compares in place
	case "event_id":
		return fEventID
	case "type":
		return fType
	case "at":
		return fAt
	case "item_id":
		return fItemID
	case "order_id":
		return fOrderID
	case "user_id":
		return fUserID
	case "quantity":
		return fQuantity
	case "price_cents":
		return fPriceCents
	case "stars":
		return fStars
	case "delta":
		return fDelta
	case "name":
		return fName
	case "category":
		return fCategory
	case "stock_total":
		return fStockTotal
	case "per_user_limit":
		return fPerUserLimit
	case "starts_at":
		return fStartsAt
	case "ends_at":
		return fEndsAt
	case "expires_at":
		return fExpiresAt
	case "payment_id":
		return fPaymentID
	}
	return -1
}

type decoder struct {
	data []byte
	i    int
}

// space skips JSON whitespace.
func (d *decoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) byte(c byte) bool {
	if d.i < len(d.data) && d.data[d.i] == c {
		d.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (d *decoder) end() bool {
	d.space()
	return d.i == len(d.data)
}

// quoted reads a string without escapes or control characters, of valid UTF-8, and returns
// it with its quotes.
func (d *decoder) quoted() ([]byte, bool) {
	start := d.i
	if !d.byte('"') {
		return nil, false
	}
	ascii := true
	for ; d.i < len(d.data); d.i++ {
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			if !ascii && !utf8.Valid(d.data[start+1:d.i-1]) {
				return nil, false
			}
			return d.data[start:d.i], true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// integer reads a JSON number that is an integer (-?(0|[1-9][0-9]*)) fitting an int64.
func (d *decoder) integer() (int64, bool) {
	start := d.i
	d.byte('-')
	digits := d.i
	for d.i < len(d.data) && d.data[d.i] >= '0' && d.data[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.data[digits] == '0' && d.i > digits+1) {
		return 0, false
	}
	if d.i < len(d.data) {
		switch d.data[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(d.data[start:d.i]), 10, 64)
	return n, err == nil
}

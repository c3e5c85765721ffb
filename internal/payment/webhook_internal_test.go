package payment

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/paysim"
)

// TestVerifySignature: one valid v1 under any secret within the tolerance passes; a stale or
// future t, a wrong secret, and a header with a second t (a signature made for the future
// hidden behind a first t of now) do not.
func TestVerifySignature(t *testing.T) {
	const secret, old = "whsec_0123456789abcdef0123456789abcdef", "whsec_old-0123456789abcdef0123456789ab"
	body := []byte(`{"id":"evt_1","type":"payment_intent.succeeded"}`)
	now := time.Now()
	future := paysim.Sign(body, secret, now.Add(2*time.Hour))
	futureT, futureV1, _ := strings.Cut(future, ",")
	for _, c := range []struct {
		name, header string
		ok           bool
	}{
		{"valid", paysim.Sign(body, secret, now), true},
		{"valid under the second secret", paysim.Sign(body, old, now), true},
		{"stale", paysim.Sign(body, secret, now.Add(-301*time.Second)), false},
		{"future", future, false},
		{"wrong secret", paysim.Sign(body, "whsec_nope-0123456789abcdef0123456789", now), false},
		{"a second t", "t=" + strings.TrimPrefix(strings.Split(paysim.Sign(body, secret, now), ",")[0], "t=") + "," + futureT + "," + futureV1, false},
		{"no t", futureV1, false},
		{"empty", "", false},
	} {
		err := verifySignature(body, c.header, []string{secret, old}, now)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

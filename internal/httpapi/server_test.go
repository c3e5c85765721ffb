package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// /readyz tells the public one word; the cause (an address, a server error) goes to the log.
func TestReadyzHidesItsCause(t *testing.T) {
	s := bareServer(t, func(context.Context) error { return errors.New("dial tcp 10.1.2.3:6379: refused") })
	w := serve(s, "GET", "/readyz", nil)
	if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "10.1.2.3") {
		t.Fatalf("readyz answered %d %s", w.Code, w.Body.String())
	}
}

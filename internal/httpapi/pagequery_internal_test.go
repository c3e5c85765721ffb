package httpapi

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/gin-gonic/gin"
)

// readPageQuery parses the query by hand (no url.Values map per request); it must read every
// query as url.Values would: the first of a repeated parameter, escapes and '+' decoded, pairs
// that do not unescape (or hold ';') left out, any other name refused.
func TestReadPageQueryMatchesURLValues(t *testing.T) {
	reference := func(raw string) (pageQuery, bool) {
		values, _ := url.ParseQuery(raw)
		for k := range values {
			if k != "limit" && k != "cursor" && k != "category" {
				return pageQuery{}, false
			}
		}
		c := &gin.Context{Request: httptest.NewRequest("GET", "/api/items", nil)}
		c.Request.URL.RawQuery = url.Values{"limit": {values.Get("limit")}, "cursor": {values.Get("cursor")},
			"category": {values.Get("category")}}.Encode()
		q, err := readPageQuery(c)
		return q, err == nil
	}
	for _, raw := range []string{
		"", "limit=5", "limit=5&limit=7", "limit=%35", "cursor=a1&limit=2", "category=ev%65n", "category=a+b",
		"category=%zz&limit=3", "limit=3;x=1", "limit=3&&cursor=b", "&", "=", "limit", "limit=", "sort=id",
		"limit=5&sort=id", "Limit=5", "category=%E2%82%AC", "cursor=a.b", "limit=1001", "limit=x", "%zz=1&limit=2",
	} {
		c := &gin.Context{Request: httptest.NewRequest("GET", "/api/items", nil)}
		c.Request.URL.RawQuery = raw
		got, err := readPageQuery(c)
		want, ok := reference(raw)
		if (err == nil) != ok || (ok && got != want) {
			t.Errorf("?%s: %+v, %v; url.Values reads %+v, ok %v", raw, got, err, want, ok)
		}
	}
}

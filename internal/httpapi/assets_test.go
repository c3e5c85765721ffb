package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/web"
)

// TestAssetsAreCachedAndCompressed: the pages link their assets by fingerprint; a
// fingerprinted asset may be cached for a year, a bare one is revalidated by its ETag (304);
// text goes gzip-compressed to a client that takes it, the same bytes once unpacked.
func TestAssetsAreCachedAndCompressed(t *testing.T) {
	srv := httpapi.New(httpapi.Deps{Web: web.Files})
	get := func(path string, hdr ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		return w
	}
	page := get("/").Body.String()
	link := regexp.MustCompile(`"(/assets/shop\.js\?v=[0-9a-f]{16})"`).FindStringSubmatch(page)
	if link == nil {
		t.Fatalf("the shop page does not link a fingerprinted shop.js:\n%s", page)
	}
	if !strings.Contains(page, `"/assets/favicon.svg?v=`) {
		t.Errorf("the shop page links no favicon")
	}

	plain := get(link[1])
	if plain.Code != 200 || plain.Header().Get("Cache-Control") != "public, max-age=31536000, immutable" {
		t.Fatalf("fingerprinted: %d, Cache-Control %q", plain.Code, plain.Header().Get("Cache-Control"))
	}
	tag := plain.Header().Get("ETag")
	if !regexp.MustCompile(`^"[0-9a-f]{16}"$`).MatchString(tag) || plain.Header().Get("Content-Encoding") != "" {
		t.Fatalf("plain reply: ETag %q, Content-Encoding %q", tag, plain.Header().Get("Content-Encoding"))
	}
	if ct := plain.Header().Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Errorf("Content-Type %q", ct)
	}

	bare := get("/assets/shop.js", "Accept-Encoding", "gzip, deflate, br")
	if bare.Header().Get("Cache-Control") != "public, no-cache" || bare.Header().Get("Content-Encoding") != "gzip" ||
		bare.Header().Get("ETag") != "W/"+tag || bare.Header().Get("Vary") != "Accept-Encoding" {
		t.Fatalf("bare gzip reply: %v", bare.Header())
	}
	zr, err := gzip.NewReader(bare.Body)
	if err != nil {
		t.Fatal(err)
	}
	unpacked, _ := io.ReadAll(zr)
	if !bytes.Equal(unpacked, plain.Body.Bytes()) || bare.Body.Len() >= plain.Body.Len()/2 {
		t.Fatalf("gzip: %d bytes unpack to %d, plain %d", bare.Body.Len(), len(unpacked), plain.Body.Len())
	}

	for _, inm := range []string{tag, "W/" + tag, `"other", ` + tag} {
		if w := get("/assets/shop.js", "If-None-Match", inm, "Accept-Encoding", "gzip"); w.Code != http.StatusNotModified || w.Body.Len() != 0 {
			t.Errorf("If-None-Match %s: %d with %d bytes, want 304 and none", inm, w.Code, w.Body.Len())
		}
	}
	if w := get("/assets/shop.js", "If-None-Match", `"stale"`); w.Code != 200 {
		t.Errorf("a stale tag: %d, want 200", w.Code)
	}
	if w := get("/favicon.ico"); w.Code != 200 || w.Header().Get("Content-Type") != "image/svg+xml" {
		t.Errorf("/favicon.ico: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	if w := get("/assets/missing.js"); w.Code != 404 {
		t.Errorf("a missing asset: %d", w.Code)
	}
}

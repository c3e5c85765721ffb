package httpapi

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// asset is one embedded file under /assets/, prepared once at start: its tag (a hash of the
// content) and, for text that shrinks, its gzip encoding.
type asset struct {
	body, gz []byte
	typ, tag string // tag: the quoted ETag ("<hash>"); the gzip reply carries W/"<hash>"
	version  string // the hash, as the pages' ?v= fingerprint
}

// assetCache: a fingerprinted URL (/assets/shop.js?v=<its hash>, as the pages link them)
// never changes, so browsers and CDNs keep it a year without asking; a bare URL is
// revalidated (If-None-Match → 304), so a deploy is seen at the next page load.
const (
	assetImmutable   = "public, max-age=31536000, immutable"
	assetRevalidate  = "public, no-cache"
	assetGzipMinSize = 512
)

// loadAssets reads every file under dir of fsys and prepares it.
func loadAssets(fsys fs.FS) (map[string]*asset, error) {
	out := map[string]*asset{}
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		v := hex.EncodeToString(sum[:8])
		a := &asset{body: b, tag: `"` + v + `"`, version: v, typ: mime.TypeByExtension(path.Ext(name))}
		if a.typ == "" {
			a.typ = http.DetectContentType(b)
		}
		if compressible(a.typ) && len(b) >= assetGzipMinSize {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			_, werr := zw.Write(b)
			if werr == nil && zw.Close() == nil && buf.Len() < len(b) {
				a.gz = buf.Bytes()
			}
		}
		out[name] = a
		return nil
	})
	return out, err
}

func compressible(typ string) bool {
	return strings.HasPrefix(typ, "text/") || strings.Contains(typ, "javascript") ||
		strings.Contains(typ, "json") || strings.Contains(typ, "svg")
}

// serve answers GET or HEAD of a: 304 when If-None-Match holds its tag, else the body (gzip
// when the client takes it), with its ETag and a Cache-Control that depends on whether the
// URL carries the current fingerprint.
func (a *asset) serve(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", pagePolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Vary", "Accept-Encoding")
	if c.Query("v") == a.version {
		h.Set("Cache-Control", assetImmutable)
	} else {
		h.Set("Cache-Control", assetRevalidate)
	}
	body, tag := a.body, a.tag
	if a.gz != nil && acceptsGzip(c.GetHeader("Accept-Encoding")) {
		body, tag = a.gz, "W/"+a.tag
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("ETag", tag)
	if inm := c.GetHeader("If-None-Match"); inm != "" && etagMatches(inm, a.tag) {
		h.Del("Content-Encoding")
		c.Status(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", a.typ)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	c.Status(http.StatusOK)
	if c.Request.Method != http.MethodHead {
		_, _ = c.Writer.Write(body) // a client gone mid-answer: nothing to do
	}
}

// fingerprint rewrites a page's links to its assets ("/assets/shop.js") to fingerprinted ones
// ("/assets/shop.js?v=<hash>"), so a page always loads the assets it was built with and they
// can be cached for good.
func fingerprint(page []byte, assets map[string]*asset) []byte {
	for name, a := range assets {
		page = bytes.ReplaceAll(page, []byte(`"/assets/`+name+`"`), []byte(`"/assets/`+name+`?v=`+a.version+`"`))
	}
	return page
}

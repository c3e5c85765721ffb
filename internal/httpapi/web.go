package httpapi

import (
	"io/fs"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// pagePolicy is the pages' Content-Security-Policy: their scripts, styles and fetches come
// from this origin only (no inline code anywhere), images also from https: (items' pictures,
// image_url), and no other site may frame them.
const pagePolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: https:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// webRoutes serves the embedded pages: / (shopper), /admin, and the files under /assets/
// (never a directory listing). Every file is read, hashed and compressed once, here; the
// pages link their assets by fingerprint (assets.go).
func (s *Server) webRoutes() {
	assetFS, err := fs.Sub(s.Web, "assets")
	if err != nil {
		return
	}
	assets, err := loadAssets(assetFS)
	if err != nil {
		return
	}
	page := func(name string) gin.HandlerFunc {
		b, err := fs.ReadFile(s.Web, name)
		if err == nil {
			b = fingerprint(b, assets)
		}
		return func(c *gin.Context) {
			if err != nil {
				fail(c, errNoRoute)
				return
			}
			c.Header("Cache-Control", "no-cache")
			c.Header("Content-Security-Policy", pagePolicy)
			c.Data(http.StatusOK, "text/html; charset=utf-8", b)
		}
	}
	s.engine.GET("/", page("index.html"))
	s.engine.GET("/admin", page("admin.html"))
	s.engine.GET("/admin/monitor", page("monitor.html"))
	serveAsset := func(c *gin.Context) {
		a := assets[strings.TrimPrefix(c.Param("filepath"), "/")]
		if a == nil {
			fail(c, errNoRoute)
			return
		}
		a.serve(c)
	}
	s.engine.GET("/assets/*filepath", serveAsset)
	s.engine.HEAD("/assets/*filepath", serveAsset)
	// Browsers ask for /favicon.ico whatever the page links; the pages link the SVG.
	if icon := assets["favicon.svg"]; icon != nil {
		s.engine.GET("/favicon.ico", icon.serve)
	}
}

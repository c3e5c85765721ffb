package httpapi

import (
	"io/fs"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// pagePolicy is the pages' Content-Security-Policy: their scripts, styles and fetches come
// from this origin only (no inline code anywhere), and no other site may frame them.
const pagePolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// webRoutes serves the embedded pages: / (shopper), /admin, and the files under /assets/
// (never a directory listing).
func (s *Server) webRoutes() {
	page := func(name string) gin.HandlerFunc {
		return func(c *gin.Context) {
			b, err := fs.ReadFile(s.Web, name)
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
	assets, err := fs.Sub(s.Web, "assets")
	if err != nil {
		return
	}
	files := http.FileServer(http.FS(assets))
	serveAsset := func(c *gin.Context) {
		name := strings.TrimPrefix(c.Param("filepath"), "/")
		if st, err := fs.Stat(assets, name); err != nil || st.IsDir() {
			fail(c, errNoRoute)
			return
		}
		c.Header("Content-Security-Policy", pagePolicy)
		c.Request.URL.Path = "/" + name
		files.ServeHTTP(c.Writer, c.Request)
	}
	s.engine.GET("/assets/*filepath", serveAsset)
	s.engine.HEAD("/assets/*filepath", serveAsset)
}

package httpapi

import (
	"io/fs"
	"net/http"

	"github.com/gin-gonic/gin"
)

// webRoutes serves the embedded pages: / (shopper), /admin, and /assets/*.
func (s *Server) webRoutes() {
	page := func(name string) gin.HandlerFunc {
		return func(c *gin.Context) {
			b, err := fs.ReadFile(s.Web, name)
			if err != nil {
				fail(c, errNoRoute)
				return
			}
			c.Header("Cache-Control", "no-cache")
			c.Data(http.StatusOK, "text/html; charset=utf-8", b)
		}
	}
	s.engine.GET("/", page("index.html"))
	s.engine.GET("/admin", page("admin.html"))
	if assets, err := fs.Sub(s.Web, "assets"); err == nil {
		s.engine.StaticFS("/assets", http.FS(assets))
	}
}

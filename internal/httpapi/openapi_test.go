package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/web"
)

// openapiDoc is the part of an OpenAPI 3 document the checks read.
type openapiDoc struct {
	OpenAPI    string                    `json:"openapi"`
	Paths      map[string]map[string]any `json:"paths"` // path -> method (or "parameters") -> ...
	Components map[string]map[string]any `json:"components"`
}

var httpMethods = map[string]bool{"get": true, "put": true, "post": true, "delete": true,
	"options": true, "head": true, "patch": true, "trace": true}

// openapiServer is the api with every route registered (web pages included) and no backing
// services: route listing and the document need none.
func openapiServer(t *testing.T) *httpapi.Server {
	t.Helper()
	cfg, err := config.Parse(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return httpapi.New(httpapi.Deps{
		Options: app.HTTPOptions(cfg),
		Auth:    httpapi.NewAuth(cfg.JWTSecret, cfg.AdminToken, time.Hour),
		Web:     web.Files,
	})
}

// fetchOpenAPI reads the document the way a client does, from /api/openapi.json.
func fetchOpenAPI(t *testing.T, srv http.Handler) (openapiDoc, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/openapi.json", nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var doc openapiDoc
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc, raw
}

var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

// openapiPath turns Gin's /items/:id (or /assets/*filepath) into OpenAPI's /items/{id}.
func openapiPath(ginPath string) string { return ginParam.ReplaceAllString(ginPath, "{$1}") }

// Every route Gin registers is documented, and every documented operation is registered.
func TestOpenAPIMatchesRegisteredRoutes(t *testing.T) {
	srv := openapiServer(t)
	doc, _ := fetchOpenAPI(t, srv)

	registered := map[string]bool{}
	for _, r := range srv.Engine().Routes() {
		registered[strings.ToLower(r.Method)+" "+openapiPath(r.Path)] = true
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths {
		for method := range item {
			if httpMethods[method] {
				documented[method+" "+path] = true
			}
		}
	}
	var missing, extra []string
	for r := range registered {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for d := range documented {
		if !registered[d] {
			extra = append(extra, d)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes registered but not in openapi.json:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(extra) > 0 {
		t.Errorf("operations in openapi.json that no route serves:\n  %s", strings.Join(extra, "\n  "))
	}
	if len(registered) < 20 {
		t.Errorf("only %d routes registered; the contract has more", len(registered))
	}
}

// The document is internally consistent: every $ref resolves, path parameters are declared,
// operation ids are unique, errors use the Error schema, protected routes name their scheme.
func TestOpenAPIDocumentIsConsistent(t *testing.T) {
	doc, raw := fetchOpenAPI(t, openapiServer(t))
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi = %q, want 3.x", doc.OpenAPI)
	}
	for _, name := range []string{"Item", "Order", "Error"} {
		if doc.Components["schemas"][name] == nil {
			t.Errorf("components.schemas.%s is missing", name)
		}
	}
	for _, name := range []string{"shopperToken", "adminToken"} {
		if doc.Components["securitySchemes"][name] == nil {
			t.Errorf("components.securitySchemes.%s is missing", name)
		}
	}

	// Every $ref points at something that exists.
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok && resolveRef(raw, ref) == nil {
				t.Errorf("%s: $ref %s does not resolve", at, ref)
			}
			for k, e := range x {
				walk(e, at+"/"+k)
			}
		case []any:
			for _, e := range x {
				walk(e, at)
			}
		}
	}
	walk(raw, "#")

	ids := map[string]string{}
	for path, item := range doc.Paths {
		declared := paramNames(raw, item["parameters"])
		for method, v := range item {
			if !httpMethods[method] {
				continue
			}
			op, _ := v.(map[string]any)
			where := strings.ToUpper(method) + " " + path
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s: no operationId", where)
			} else if other, dup := ids[id]; dup {
				t.Errorf("%s: operationId %q also used by %s", where, id, other)
			}
			ids[id] = where

			names := paramNames(raw, op["parameters"])
			for n := range declared {
				names[n] = true
			}
			for _, m := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(path, -1) {
				if !names["path:"+m[1]] {
					t.Errorf("%s: path parameter %s is not declared", where, m[1])
				}
			}

			responses, _ := op["responses"].(map[string]any)
			if len(responses) == 0 {
				t.Errorf("%s: no responses", where)
			}
			for status, r := range responses {
				if status[0] == '2' || status[0] == '3' || method == "head" { // 304 has no body
					continue
				}
				if !strings.Contains(mustJSON(t, resolveDeep(raw, r)), `"#/components/schemas/Error"`) {
					t.Errorf("%s: response %s does not use the Error schema", where, status)
				}
			}

			security := mustJSON(t, op["security"])
			switch {
			case strings.HasPrefix(path, "/api/admin/"):
				if !strings.Contains(security, "adminToken") {
					t.Errorf("%s: admin route without the adminToken security scheme", where)
				}
				if responses["403"] == nil || responses["401"] == nil {
					t.Errorf("%s: admin route must document 401 and 403", where)
				}
			case strings.HasPrefix(path, "/api/orders") || strings.HasSuffix(path, "/purchase") || strings.HasSuffix(path, "/rating"):
				if !strings.Contains(security, "shopperToken") {
					t.Errorf("%s: shopper route without the shopperToken security scheme", where)
				}
				if responses["401"] == nil {
					t.Errorf("%s: shopper route must document 401", where)
				}
			}
		}
	}
}

// resolveRef follows a local reference such as #/components/schemas/Item; nil if absent.
func resolveRef(root map[string]any, ref string) any {
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	var cur any = root
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

// resolveDeep replaces a top-level $ref (a shared response) by its target.
func resolveDeep(root map[string]any, v any) any {
	if m, ok := v.(map[string]any); ok {
		if ref, ok := m["$ref"].(string); ok {
			return resolveRef(root, ref)
		}
	}
	return v
}

// paramNames lists parameters as "in:name" (following $refs).
func paramNames(root map[string]any, v any) map[string]bool {
	out := map[string]bool{}
	list, _ := v.([]any)
	for _, p := range list {
		m, _ := resolveDeep(root, p).(map[string]any)
		in, _ := m["in"].(string)
		name, _ := m["name"].(string)
		out[in+":"+name] = true
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

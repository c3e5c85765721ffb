package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
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

// statusOf is the number of each http.Status name the package answers errors with.
var statusOf = map[string]int{
	"BadRequest": 400, "Unauthorized": 401, "Forbidden": 403, "NotFound": 404, "Conflict": 409,
	"RequestEntityTooLarge": 413, "TooManyRequests": 429, "InternalServerError": 500, "BadGateway": 502, "ServiceUnavailable": 503,
}

// answeredCodes reads the package's source for every error it can answer: each
// `http.Status<Name>, "<code>"` (the sentinel table, the apiError values, abort calls).
func answeredCodes(t *testing.T) map[string]int {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	pair := regexp.MustCompile(`http\.Status(\w+),\s*"([a-z_]+)"`)
	codes := map[string]int{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range pair.FindAllStringSubmatch(string(b), -1) {
			status, ok := statusOf[m[1]]
			if !ok {
				t.Fatalf("%s: http.Status%s: add its number to statusOf", f, m[1])
			}
			if other, dup := codes[m[2]]; dup && other != status {
				t.Errorf("%s: code %s is answered with %d and %d", f, m[2], other, status)
			}
			codes[m[2]] = status
		}
	}
	if len(codes) < 10 {
		t.Fatalf("found only %d error codes in the source: %v", len(codes), codes)
	}
	return codes
}

// Every error code the api answers is in the Error schema's enum (a client validating answers
// against the document accepts it) and in docs/api.md's table with its status; neither lists a
// code the api never answers.
func TestErrorCodesDocumented(t *testing.T) {
	codes := answeredCodes(t)
	_, raw := fetchOpenAPI(t, openapiServer(t))
	enum, _ := resolveRef(raw, "#/components/schemas/Error/properties/error/properties/code/enum").([]any)
	inEnum := map[string]bool{}
	for _, c := range enum {
		inEnum[c.(string)] = true
		if _, ok := codes[c.(string)]; !ok {
			t.Errorf("openapi.json: the Error enum lists %s, which the api never answers", c)
		}
	}

	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	section, _, _ := strings.Cut(string(b[strings.Index(string(b), "\n## Errors\n"):]), "\n## Request ids")
	row := regexp.MustCompile(`(?m)^\| (\d{3}) \| ([^|]+) \|`)
	documented := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		status, _ := strconv.Atoi(m[1])
		for _, c := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[2], -1) {
			documented[c[1]] = status
		}
	}
	for code, status := range codes {
		if !inEnum[code] {
			t.Errorf("openapi.json: the Error enum lacks %s", code)
		}
		if got, ok := documented[code]; !ok {
			t.Errorf("docs/api.md: the errors table lacks %d %s", status, code)
		} else if got != status {
			t.Errorf("docs/api.md: the errors table says %d %s; the api answers %d", got, code, status)
		}
	}
	for code := range documented {
		if _, ok := codes[code]; !ok {
			t.Errorf("docs/api.md: the errors table lists %s, which the api never answers", code)
		}
	}
}

// Every operation, asked without a token, with a shopper token and with the admin token (and,
// on an item route, with a malformed item id), answers only statuses its document lists; a
// route that answers 401 without a token names a security scheme, one that answers a shopper
// 403 forbidden names adminToken, and a route that needs no token names none.
func TestOpenAPIAnswersAreDocumented(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("phone", 10, 9)
	doc, _ := fetchOpenAPI(t, a.srv)
	shopper := a.token("alice")
	for path, item := range doc.Paths {
		for method, v := range item {
			if !httpMethods[method] {
				continue
			}
			where := strings.ToUpper(method) + " " + path
			if path == "/api/items/stream" {
				continue // an answer that never ends; stream_test.go holds it to the contract
			}
			op, _ := v.(map[string]any)
			responses, _ := op["responses"].(map[string]any)
			security := mustJSON(t, op["security"])
			url := strings.NewReplacer("{id}", "phone", "{filepath}", "style.css").Replace(path)
			probe := func(token, url string) reply {
				r := a.do(strings.ToUpper(method), url, token, nil)
				if responses[strconv.Itoa(r.Status)] == nil {
					t.Errorf("%s (%s): answered %d %s, which openapi.json does not list", where, url, r.Status, r.code())
				}
				return r
			}
			anonymous := probe("", url)
			switch {
			case anonymous.Status == http.StatusUnauthorized && security == "null":
				t.Errorf("%s: answers 401 without a token but names no security scheme", where)
			case anonymous.Status != http.StatusUnauthorized && security != "null":
				t.Errorf("%s: names a security scheme but answers %d without a token", where, anonymous.Status)
			}
			if anonymous.Status == http.StatusUnauthorized {
				if r := probe(shopper, url); r.code() == "forbidden" && !strings.Contains(security, "adminToken") {
					t.Errorf("%s: refuses a shopper token as forbidden but does not name adminToken", where)
				}
				probe(testAdminToken, url)
			}
			if strings.Contains(path, "/items/{id}") {
				if r := probe(testAdminToken, strings.Replace(url, "/phone", "/bad.id", 1)); r.Status != http.StatusBadRequest {
					t.Errorf("%s: a malformed item id answered %d, want 400", where, r.Status)
				}
			}
		}
	}
}

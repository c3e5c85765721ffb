package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's configuration table is the operators' reference: every variable Parse reads is
// in it exactly once, with the default Parse uses, and it names no variable Parse ignores.
// docs/api.md repeats the settings clients rely on: those rows must agree too.
func TestDocumentedConfiguration(t *testing.T) {
	p := &parser{getenv: func(string) string { return "" }, defaults: map[string]string{}}
	if _, err := parse(p); err != nil {
		t.Fatal(err)
	}
	read := p.defaults
	if len(read) < 50 {
		t.Fatalf("Parse read only %d variables: the recording missed some", len(read))
	}

	readme := configTable(t, "../../README.md", "## Configuration")
	seen := map[string]int{}
	for _, r := range readme {
		seen[r.name]++
	}
	for name := range read {
		switch seen[name] {
		case 0:
			t.Errorf("README.md: %s is read by config.Parse but not in the configuration table", name)
		case 1:
		default:
			t.Errorf("README.md: %s is in the configuration table %d times", name, seen[name])
		}
	}
	apiDoc := configTable(t, "../../docs/api.md", "## Configuration clients and operators rely on")
	for _, doc := range []struct {
		file string
		rows []documented
	}{{"README.md", readme}, {"docs/api.md", apiDoc}} {
		for _, r := range doc.rows {
			def, ok := read[r.name]
			if !ok {
				t.Errorf("%s:%d: %s is documented but config.Parse never reads it", doc.file, r.line, r.name)
			} else if !sameDefault(def, r.def) {
				t.Errorf("%s:%d: %s defaults to %q, documented as %q", doc.file, r.line, r.name, def, r.def)
			}
		}
	}
}

// documented is one variable of a configuration table, with its default as the table states
// it: the value in the cell's first code span, or "" for words (unset, none, random...).
type documented struct {
	name, def string
	line      int
}

var codeSpan = regexp.MustCompile("`([^`]*)`")

// configTable reads the first variable | default | meaning table after heading in file. A row
// may name several variables; its default cell then holds one default per variable, separated
// by ", ", or one that applies to all of them.
func configTable(t *testing.T, file, heading string) []documented {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == heading {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no heading %q", file, heading)
	}
	var rows []documented
	inTable := false
	for i := start + 1; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "| variable | default | meaning |") {
			inTable = true
			continue
		}
		if !inTable {
			continue
		}
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		if len(cells) < 3 {
			t.Fatalf("%s:%d: a row of the configuration table needs three cells: %s", file, i+1, l)
		}
		var names []string
		for _, m := range codeSpan.FindAllStringSubmatch(cells[0], -1) {
			names = append(names, m[1])
		}
		defs := strings.Split(cells[1], ", ")
		if len(names) == 0 || (len(names) > 1 && len(defs) != len(names) && len(defs) != 1) {
			t.Fatalf("%s:%d: cannot read the variables and their defaults: %s", file, i+1, l)
		}
		if len(names) == 1 {
			defs = []string{cells[1]} // a single default may hold a comma in its words
		}
		for j, name := range names {
			d := defs[0]
			if len(defs) == len(names) {
				d = defs[j]
			}
			value := ""
			if m := codeSpan.FindStringSubmatchIndex(d); m != nil && m[0] == 0 {
				value = d[m[2]:m[3]]
			}
			rows = append(rows, documented{name: name, def: value, line: i + 1})
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no configuration table after %q", file, heading)
	}
	return rows
}

// sameDefault compares a default as Parse notes it with the documented one: durations by
// value (1m and 1m0s), words without regard to case.
func sameDefault(code, doc string) bool {
	if strings.EqualFold(code, doc) {
		return true
	}
	c, err1 := time.ParseDuration(code)
	d, err2 := time.ParseDuration(doc)
	return err1 == nil && err2 == nil && c == d
}

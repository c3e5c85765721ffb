// Command testsummary reads `go test -json` from stdin, prints package results and the full
// output of every failed or skipped test, and ends with one line "go test: N passed, N failed,
// N skipped". It exits non-zero when a test or package failed or a test was skipped: a skip
// in this suite means a missing server, which must not pass silently.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	outputs := map[string]*strings.Builder{}
	var passed, failed, skipped int
	var failedNames, skippedNames []string
	pkgFailed := false
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // build errors and other plain output
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" {
				if strings.HasPrefix(e.Output, "ok ") || strings.HasPrefix(e.Output, "FAIL") ||
					strings.HasPrefix(e.Output, "---") || strings.HasPrefix(e.Output, "panic") ||
					strings.Contains(e.Output, "[build failed]") || strings.Contains(e.Output, "[no test files]") {
					fmt.Print(e.Output)
				}
				continue
			}
			b := outputs[key]
			if b == nil {
				b = &strings.Builder{}
				outputs[key] = b
			}
			if b.Len() < 64<<10 {
				b.WriteString(e.Output)
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				if e.Action == "fail" {
					pkgFailed = true
				}
				continue
			}
			switch e.Action {
			case "pass":
				passed++
			case "fail":
				failed++
				failedNames = append(failedNames, key)
				fmt.Print(outputs[key].String())
			case "skip":
				skipped++
				skippedNames = append(skippedNames, key)
				if b := outputs[key]; b != nil {
					fmt.Print(b.String())
				}
			}
			delete(outputs, key)
		}
	}
	// A test with output but no result was cut short: the test binary ended during it (a
	// panic in another goroutine, a timeout, a signal). Its output is where the cause is.
	unfinished := make([]string, 0, len(outputs))
	for key := range outputs {
		unfinished = append(unfinished, key)
	}
	sort.Strings(unfinished)
	for _, key := range unfinished {
		fmt.Printf("--- NO RESULT: %s (the test binary ended during it); its output:\n%s", key, outputs[key].String())
		failed++
		failedNames = append(failedNames, key)
	}
	sort.Strings(failedNames)
	for _, n := range failedNames {
		fmt.Println("FAILED:", n)
	}
	for _, n := range skippedNames {
		fmt.Println("SKIPPED:", n)
	}
	fmt.Printf("go test: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || skipped > 0 || pkgFailed {
		os.Exit(1)
	}
}

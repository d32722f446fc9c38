// Package conformance runs the shared corpus of protocol scenarios (conformance/scenarios.txt
// in the gpud repository; its format is conformance/README.md, version 1) against a real
// `gpud --simulate`, through this module's client and through raw sockets.
package conformance

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// DefaultSimulate is the devices a scenario gets when it has no gpud line.
const DefaultSimulate = "1x16GiB"

// Scenario is one scenario of a corpus: a fresh gpud, steps, end.
type Scenario struct {
	// Name is the scenario's name.
	Name string
	// Line is the line of its `scenario` line.
	Line int
	// Simulate is the --simulate spec (DefaultSimulate unless a gpud line says otherwise).
	Simulate string
	// Config holds the config lines, appended verbatim to gpud's config file.
	Config []string
	// Steps are the scenario's steps, in order.
	Steps []Step
}

// Step is one step line.
type Step struct {
	// Line is the step's line number in the corpus.
	Line int
	// Text is the line as written (trimmed).
	Text string
	// Client names the connection the step uses (for raw and rawfirst, only a label: they
	// open a connection of their own).
	Client string
	// Verb is the step's verb.
	Verb string
	// Lease names the lease the step is about, for the verbs that take one.
	Lease string
	// Args holds the key=value arguments.
	Args map[string]string
	// Expect is the expectation after "->" ("" when the verb takes none).
	Expect string
	// Code is the expected error code of raw and rawfirst.
	Code string
	// Frame is the frame text of raw and rawfirst, verbatim.
	Frame string
	// Millis is the pause of sleep.
	Millis int
}

type verbSpec struct {
	lease  bool     // takes a <lease>
	keys   []string // allowed keys
	expect bool     // takes (requires) "-> <expect>"
}

var requestKeys = []string{"vram", "compute", "device", "class", "timeout", "label", "host_mem", "pinned", "cpus", "numa"}

var verbs = map[string]verbSpec{
	"acquire":  {lease: true, keys: requestKeys, expect: true},
	"begin":    {lease: true, keys: requestKeys},
	"pending":  {lease: true},
	"await":    {lease: true, expect: true},
	"release":  {lease: true, expect: true},
	"resize":   {lease: true, keys: []string{"vram", "host_mem", "timeout"}, expect: true},
	"check":    {lease: true, keys: []string{"vram", "compute", "device", "host_mem", "pinned", "cpus", "numa_node"}},
	"yield":    {lease: true, expect: true},
	"revoked":  {lease: true, expect: true},
	"drop":     {},
	"status":   {keys: []string{"leases", "waiters", "devices"}},
	"drain":    {keys: []string{"device"}, expect: true},
	"undrain":  {keys: []string{"device"}, expect: true},
	"revoke":   {lease: true, expect: true},
	"raw":      {},
	"rawfirst": {},
	"sleep":    {},
}

// Parse reads a corpus. name is used in error messages (a file name).
func Parse(r io.Reader, name string) ([]Scenario, error) {
	var out []Scenario
	var cur *Scenario
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 16<<20)
	n := 0
	fail := func(format string, args ...interface{}) error {
		return fmt.Errorf("%s:%d: %s", name, n, fmt.Sprintf(format, args...))
	}
	for s.Scan() {
		n++
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		switch fields[0] {
		case "scenario":
			if cur != nil {
				return nil, fail("scenario %q starts before scenario %q ends", strings.Join(fields[1:], " "), cur.Name)
			}
			if len(fields) != 2 {
				return nil, fail("scenario needs one name without spaces")
			}
			cur = &Scenario{Name: fields[1], Line: n, Simulate: DefaultSimulate}
			continue
		case "end":
			if cur == nil {
				return nil, fail("end outside a scenario")
			}
			if len(fields) != 1 {
				return nil, fail("end takes nothing")
			}
			out = append(out, *cur)
			cur = nil
			continue
		}
		if cur == nil {
			return nil, fail("%q outside a scenario", line)
		}
		switch fields[0] {
		case "gpud":
			if len(cur.Steps) > 0 {
				return nil, fail("the gpud line must come before the steps")
			}
			for _, kv := range fields[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k != "simulate" || v == "" {
					return nil, fail("gpud takes simulate=SPEC, not %q", kv)
				}
				cur.Simulate = v
			}
			continue
		case "config":
			if len(cur.Steps) > 0 {
				return nil, fail("config lines must come before the steps")
			}
			text := strings.TrimSpace(strings.TrimPrefix(line, "config"))
			if text == "" {
				return nil, fail("config needs a TOML line")
			}
			cur.Config = append(cur.Config, text)
			continue
		}
		step, err := parseStep(line, fields)
		if err != nil {
			return nil, fail("%v", err)
		}
		step.Line = n
		cur.Steps = append(cur.Steps, step)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: scenario %q (line %d) has no end", name, cur.Name, cur.Line)
	}
	return out, nil
}

// parseStep reads `<client> <verb> [<lease>] [key=value ...] [-> <expect>]`, or a raw step.
func parseStep(line string, fields []string) (Step, error) {
	st := Step{Text: line, Args: map[string]string{}}
	if len(fields) < 2 {
		return st, fmt.Errorf("a step is `<client> <verb> …`, not %q", line)
	}
	st.Client, st.Verb = fields[0], fields[1]
	if _, ok := verbs[st.Verb]; !ok {
		return st, fmt.Errorf("unknown verb %q", st.Verb)
	}
	if !validName(st.Client) {
		return st, fmt.Errorf("client names are lowercase words, not %q", st.Client)
	}
	rest := cutField(cutField(line))
	switch st.Verb {
	case "raw", "rawfirst":
		code := strings.Fields(rest)
		if len(code) < 2 {
			return st, fmt.Errorf("%s needs a code and a frame", st.Verb)
		}
		st.Code = code[0]
		st.Frame = strings.TrimSpace(cutField(rest))
		return st, nil
	case "sleep":
		f := strings.Fields(rest)
		if len(f) != 1 {
			return st, fmt.Errorf("sleep takes milliseconds")
		}
		ms, err := strconv.Atoi(f[0])
		if err != nil || ms < 0 {
			return st, fmt.Errorf("sleep takes milliseconds, not %q", f[0])
		}
		st.Millis = ms
		return st, nil
	}
	spec := verbs[st.Verb]
	tokens := strings.Fields(rest)
	for i, tok := range tokens {
		if tok == "->" {
			if i != len(tokens)-2 {
				return st, fmt.Errorf("-> takes one expectation at the end of the line")
			}
			st.Expect = tokens[i+1]
			tokens = tokens[:i]
			break
		}
	}
	if spec.expect && st.Expect == "" {
		return st, fmt.Errorf("%s needs -> <expect>", st.Verb)
	}
	if !spec.expect && st.Expect != "" {
		return st, fmt.Errorf("%s takes no expectation", st.Verb)
	}
	if spec.lease {
		if len(tokens) == 0 || strings.Contains(tokens[0], "=") {
			return st, fmt.Errorf("%s needs a lease name", st.Verb)
		}
		st.Lease, tokens = tokens[0], tokens[1:]
	}
	for _, tok := range tokens {
		k, v, ok := strings.Cut(tok, "=")
		if !ok || k == "" {
			return st, fmt.Errorf("%q is not key=value", tok)
		}
		if !contains(spec.keys, k) {
			return st, fmt.Errorf("%s takes no %s (keys: %s)", st.Verb, k, strings.Join(spec.keys, ", "))
		}
		if _, dup := st.Args[k]; dup {
			return st, fmt.Errorf("%s given twice", k)
		}
		st.Args[k] = v
	}
	if (st.Verb == "drain" || st.Verb == "undrain") && st.Args["device"] == "" {
		return st, fmt.Errorf("%s needs device=N", st.Verb)
	}
	if st.Verb == "resize" && (st.Args["vram"] == "") == (st.Args["host_mem"] == "") {
		return st, fmt.Errorf("resize needs vram=SIZE or host_mem=SIZE")
	}
	return st, nil
}

// cutField drops the first space-separated field of s and the spaces after it.
func cutField(s string) string {
	s = strings.TrimLeft(s, " \t")
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return ""
	}
	return strings.TrimLeft(s[i:], " \t")
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpud/gpud/client/go/internal/daemon"
)

func TestParse(t *testing.T) {
	text := `# comment
scenario one
gpud simulate=2x8GiB
config limits.max_leases_per_session = 1
config scheduler.revoke_after_yield = "1s"

a acquire l1 vram=1GiB compute=yes device=0 class=high timeout=5 label=x_y -> granted
  b begin l2 vram=max
b pending l2
a sleep 5
admin sleep 5
y raw bad_frame {"type": "x"}
x raw bad_frame  not json at all
x rawfirst hello_required {"type":"request","id":1,"op":"ping"}
a status leases=1 waiters=0 devices=2
a drain device=0 -> ok
a drop
end
scenario two
a release l1 -> unknown_lease
end
`
	scs, err := Parse(strings.NewReader(text), "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(scs) != 2 || scs[0].Name != "one" || scs[0].Simulate != "2x8GiB" || scs[1].Simulate != DefaultSimulate {
		t.Fatalf("%+v", scs)
	}
	if len(scs[0].Config) != 2 || scs[0].Config[1] != `scheduler.revoke_after_yield = "1s"` {
		t.Fatalf("config %q", scs[0].Config)
	}
	st := scs[0].Steps
	if len(st) != 11 {
		t.Fatalf("%d steps", len(st))
	}
	a := st[0]
	if a.Line != 7 || a.Client != "a" || a.Verb != "acquire" || a.Lease != "l1" || a.Expect != "granted" ||
		a.Args["vram"] != "1GiB" || a.Args["label"] != "x_y" || a.Args["timeout"] != "5" || len(a.Args) != 6 {
		t.Fatalf("acquire: %+v", a)
	}
	if st[1].Verb != "begin" || st[1].Args["vram"] != "max" || st[1].Expect != "" {
		t.Fatalf("begin: %+v", st[1])
	}
	if st[3].Verb != "sleep" || st[3].Millis != 5 || st[3].Client != "a" || st[4].Client != "admin" || st[4].Millis != 5 {
		t.Fatalf("sleep: %+v %+v", st[3], st[4])
	}
	if st[5].Verb != "raw" || st[5].Code != "bad_frame" || st[5].Frame != `{"type": "x"}` {
		t.Fatalf("raw: %+v", st[5])
	}
	if st[6].Client != "x" || st[6].Frame != "not json at all" || st[7].Verb != "rawfirst" || st[7].Code != "hello_required" {
		t.Fatalf("raw with a client: %+v %+v", st[6], st[7])
	}
	if st[8].Args["devices"] != "2" || st[9].Args["device"] != "0" || st[9].Expect != "ok" || st[10].Verb != "drop" {
		t.Fatalf("status, drain, drop: %+v", st[8:])
	}
	for _, bad := range []string{
		"a acquire l1 -> granted\n",                                  // outside a scenario
		"scenario x\na acquire l1 vram=1GiB\nend\n",                  // acquire needs an expectation
		"scenario x\na begin l1 vram=1GiB -> granted\nend\n",         // begin takes none
		"scenario x\na acquire vram=1GiB -> granted\nend\n",          // no lease name
		"scenario x\na acquire l1 size=1GiB -> granted\nend\n",       // unknown key
		"scenario x\na acquire l1 vram=1 vram=2 -> granted\nend\n",   // twice
		"scenario x\na fly l1\nend\n",                                // unknown verb
		"scenario x\na acquire l1 vram=1GiB -> granted extra\nend\n", // one expectation
		"scenario x\na drain -> ok\nend\n",                           // drain needs device
		"scenario x\na resize l1 -> ok\nend\n",                       // resize needs vram
		"scenario x\na resize l1 vram=1 host_mem=1 -> ok\nend\n",     // one of the two
		"scenario x\nsleep soon\nend\n",                              // milliseconds
		"scenario x\nraw bad_frame\nend\n",                           // no frame
		"scenario x\na drop\n",                                       // no end
		"scenario x\nscenario y\nend\n",                              // nested
		"scenario x\na drop\ngpud simulate=1x1GiB\nend\n",            // gpud after steps
		"scenario x\ngpud devices=2\nend\n",                          // gpud takes simulate only
		"scenario x y\nend\n",                                        // a name with a space
		"end\n",                                                      // end outside
		"scenario x\nA drop\nend\n",                                  // lowercase client names
	} {
		if _, err := Parse(strings.NewReader(bad), "bad"); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

// The runner sees a step that does not hold, and says where and what.
func TestRunnerReportsFailures(t *testing.T) {
	bin, err := daemon.Binary("../../..")
	if err != nil {
		t.Skipf("skipped, no daemon to test against: %v", err)
	}
	cases := []struct {
		steps    string
		line     int
		expected string
		seen     string
	}{
		{"a acquire l1 vram=17GiB -> granted", 2, "granted", "never_fits"},
		{"a acquire l1 vram=1GiB -> never_fits", 2, "never_fits", "granted"},
		{"a acquire l1 vram=1GiB -> granted\na check l1 vram=2GiB compute=yes", 3, "vram=2147483648 compute=yes", "vram=1073741824 compute=no"},
		{"a begin l1 vram=1GiB\na pending l1", 3, "still waiting", "granted"},
		{"a acquire l1 vram=16GiB -> granted\nb begin l2 vram=1GiB timeout=50\nb await l2 -> granted", 4, "granted", "timed_out"},
		{"a acquire l1 compute=yes -> granted\na yield l1 -> yes", 3, "a yield notice within 2 s", "none"},
		{"a acquire l1 compute=yes -> granted\na revoked l1 -> yes", 3, "revoked within 2 s", "still held"},
		{"a acquire l1 vram=1GiB -> granted\na status leases=2 devices=1", 3, "leases=2 devices=1", "leases=1 devices=1"},
		{"a acquire l1 vram=1GiB -> granted\na release l1 -> ok\na release l1 -> ok", 4, "ok", "unknown_lease"},
		{"a drain device=0 -> unknown_device", 2, "unknown_device", "ok"},
		{"x raw never_fits {\"type\":\"request\",\"id\":1,\"op\":\"ping\"}", 2, "error never_fits", "a reply frame without an error"},
		{"x raw bad_frame {\"type\":\"request\",\"id\":1,\"op\":{\"acquire\":{\"vram_bytes\":1}}}", 2, "error bad_frame", "a reply frame without an error"},
		{"x rawfirst bad_frame {\"type\":\"hello\",\"version\":2}", 2, "error bad_frame", "unsupported_version"},
		{"a acquire l1 vram=1GiB -> granted\na resize l1 vram=2GiB -> timed_out", 3, "timed_out", "ok"},
		{"a release nothing -> ok", 2, "a valid step", "no lease named nothing was granted"},
	}
	for _, k := range cases {
		text := "scenario failing\n" + k.steps + "\nend\n"
		scs, err := Parse(strings.NewReader(text), "t")
		if err != nil {
			t.Fatal(err)
		}
		err = Run(context.Background(), scs[0], Options{Gpud: bin})
		var se *StepError
		if !errors.As(err, &se) {
			t.Errorf("%q: %v", k.steps, err)
			continue
		}
		if se.Scenario != "failing" || se.Line != k.line || se.Expected != k.expected || !strings.HasPrefix(se.Seen, k.seen) {
			t.Errorf("%q: line %d, expected %q, seen %q", k.steps, se.Line, se.Expected, se.Seen)
		}
		if !strings.Contains(se.Error(), "scenario failing, line ") || se.Log == "" {
			t.Errorf("message: %v", se)
		}
	}
}

package gpud_test

import (
	"context"
	"os"
	"testing"

	"github.com/gpud/gpud/client/go/conformance"
	"github.com/gpud/gpud/client/go/internal/daemon"
)

// The shared corpus of the repository (conformance/scenarios.txt), every scenario through
// this client.
func TestConformanceCorpus(t *testing.T) {
	const corpus = "../../conformance/scenarios.txt"
	bin, err := daemon.Binary("../..")
	if err != nil {
		t.Skipf("skipped, no daemon to test against: %v", err)
	}
	f, err := os.Open(corpus)
	if err != nil {
		t.Fatalf("the corpus: %v", err)
	}
	defer f.Close()
	scenarios, err := conformance.Parse(f, corpus)
	if err != nil {
		t.Fatal(err)
	}
	if len(scenarios) == 0 {
		t.Fatal("the corpus has no scenarios")
	}
	for _, sc := range scenarios {
		sc := sc
		t.Run(sc.Name, func(t *testing.T) {
			opts := conformance.Options{Gpud: bin}
			if testing.Verbose() {
				opts.Logf = t.Logf
			}
			if err := conformance.Run(context.Background(), sc, opts); err != nil {
				t.Fatal(err)
			}
		})
	}
}

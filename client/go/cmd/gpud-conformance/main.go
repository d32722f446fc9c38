// Command gpud-conformance runs corpus files of protocol scenarios (conformance/README.md)
// against a real gpud through the Go client.
//
//	go run ./cmd/gpud-conformance [-gpud PATH] [-run REGEXP] [-v] FILE...
//
// The gpud binary is -gpud, else $GPUD_BIN, else target/debug/gpud of the repository
// (found from the working directory upwards). The exit status is 1 when a scenario fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/gpud/gpud/client/go/conformance"
	"github.com/gpud/gpud/client/go/internal/daemon"
)

func main() {
	bin := flag.String("gpud", "", "the gpud binary (default: $GPUD_BIN, else target/debug/gpud of the repository)")
	run := flag.String("run", "", "run only the scenarios whose name matches this regular expression")
	verbose := flag.Bool("v", false, "print every step")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: gpud-conformance [-gpud PATH] [-run REGEXP] [-v] FILE...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *bin == "" {
		b, err := daemon.Binary(repoRoot())
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpud-conformance:", err)
			os.Exit(2)
		}
		*bin = b
	}
	var keep func(string) bool
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpud-conformance: -run:", err)
			os.Exit(2)
		}
		keep = re.MatchString
	}
	opts := conformance.Options{Gpud: *bin}
	if *verbose {
		opts.Logf = func(format string, args ...interface{}) { fmt.Printf("  "+format+"\n", args...) }
	}
	status := 0
	for _, file := range flag.Args() {
		err := conformance.RunFile(context.Background(), file, opts, keep, func(name string, err error) {
			if err != nil {
				fmt.Printf("FAIL %s\n%v\n", name, err)
			} else {
				fmt.Printf("ok   %s\n", name)
			}
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpud-conformance: %s: %v\n", file, err)
			status = 1
		}
	}
	os.Exit(status)
}

// repoRoot is the nearest directory upwards holding Cargo.toml and proto/, else ".".
func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "proto", "src", "message.rs")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

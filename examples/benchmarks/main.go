// Command benchmarks runs Strand beside its peers and prints, per suite, a
// table and lines "ratio NAME VALUE" (VALUE = the peer's time divided by
// Strand's, so above 1 means Strand is faster).
//
//	go run .                 # every suite, full shapes
//	go run . -suite assign   # one suite
//	go run . -quick          # small shapes, to prove it builds and runs
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
)

// suites maps a suite name to its function; each lives in its own file.
var suites = map[string]func(quick bool) error{
	"assign": assignSuite,
}

func main() {
	suite := flag.String("suite", "", "run only this suite")
	quick := flag.Bool("quick", false, "small shapes")
	flag.Parse()
	var names []string
	for name := range suites {
		if *suite == "" || *suite == name {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		fmt.Fprintf(os.Stderr, "unknown suite %q\n", *suite)
		os.Exit(2)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Printf("== %s\n", name)
		if err := suites[name](*quick); err != nil {
			fmt.Fprintf(os.Stderr, "suite %s: %v\n", name, err)
			os.Exit(1)
		}
	}
}

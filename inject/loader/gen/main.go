// Command gen writes the stage-0 loader for every supported architecture
// into a directory as ferry-loader-linux-<arch>, with its listing beside it
// as ferry-loader-linux-<arch>.lst:
//
//	go run ./inject/loader/gen -o bin
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrypkg/ferry/inject/loader"
)

func main() {
	out := flag.String("o", "bin", "output directory")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, arch := range loader.Arches {
		b, err := loader.ELF(arch)
		if err != nil {
			return err
		}
		l, err := loader.Listing(arch)
		if err != nil {
			return err
		}
		p := filepath.Join(dir, "ferry-loader-linux-"+arch)
		if err := os.WriteFile(p, b, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p+".lst", []byte(l), 0o644); err != nil {
			return err
		}
	}
	return nil
}

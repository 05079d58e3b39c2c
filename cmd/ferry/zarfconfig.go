package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrypkg/ferry/artifact/zarf"
)

// zarfConfigEnv names the Zarf config file, as it does for Zarf.
const zarfConfigEnv = "ZARF_CONFIG"

// zarfConfig reads the Zarf config file zarf package create would read
// for a zarf.yaml in dir: the file $ZARF_CONFIG names, else the
// zarf-config.{json,toml,yaml,yml} beside the zarf.yaml, else the one in
// the current folder (where Zarf looks: its own packages/ are built from
// the repository's root). nil when there is none. $HOME/.zarf, where
// Zarf looks last, is not read.
func zarfConfig(dir string) (*zarf.Config, error) {
	if p, ok := os.LookupEnv(zarfConfigEnv); ok && p != "" {
		return zarf.ReadConfig(p)
	}
	for _, d := range []string{dir, "."} {
		p, err := zarf.FindConfig(d)
		if err != nil {
			return nil, err
		}
		if p != "" {
			return zarf.ReadConfigIn(d, filepath.Base(p))
		}
	}
	return nil, nil
}

// zarfDefinitions is the zarf.yaml files args name: a file as it is, a
// folder's zarf.yaml, else every zarf.yaml below it (zarf.FindDefinitions).
func zarfDefinitions(args []string) ([]string, error) {
	var srcs []string
	for _, arg := range args {
		fi, err := os.Stat(arg)
		if err != nil || !fi.IsDir() {
			srcs = append(srcs, arg)
			continue
		}
		found, err := zarf.FindDefinitions(arg)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, found...)
	}
	if len(srcs) > zarf.MaxDefinitions {
		return nil, fmt.Errorf("%d zarf.yaml files, more than %d", len(srcs), zarf.MaxDefinitions)
	}
	return srcs, nil
}

package main

import "github.com/spf13/cobra"

// newPackageCmd groups the package verbs.
func newPackageCmd() *cobra.Command {
	return &cobra.Command{Use: "package", Short: "Create, inspect and move packages"}
}
